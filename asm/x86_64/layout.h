/*
 * Byte offsets of the Rust structures the trampolines read and write.
 * Each is asserted at compile time on the Rust side (const blocks next to
 * the structures: ThreadBlock in src/rt/thread.rs, ShadowStack and Frame in
 * src/rt/shadow.rs, Ring in src/rt/ring.rs, RawEvent in
 * src/tracers/graph/mod.rs), so the two sides cannot drift apart silently.
 */

/* fntrace_thread: this thread's block (TLS), struct ThreadBlock. */
#define THREAD_IN_TRACER        0   /* u8: the recursion guard             */
#define THREAD_SHADOW_IN_USE    1   /* u8: Rust code holds the shadow stack */
#define THREAD_SHADOW           8   /* *mut ShadowStack, null until needed */
#define THREAD_FAST_TRACER_SLOT 16  /* the fast tracer's (graph's) ring    */
#define THREAD_GENERIC_ENTRIES 24   /* u64: calls that took the Rust path */
#define THREAD_STACK_LOW       32   /* [low, high): slots on one stack, as */
#define THREAD_STACK_HIGH      40   /* the generic path last found them,  */
#define THREAD_STACK_CONTEXTS  48   /* with this many context stacks noted */
#define THREAD_ERRNO           56   /* int *: this thread's errno (Rust) */
#define THREAD_BLOCK_SIZE      64

/* struct ShadowStack { len: usize, frames: [Frame; MAX_DEPTH] } */
#define SHADOW_LEN              0
#define SHADOW_FRAMES           8
#define SHADOW_MAX_DEPTH     1024

/* struct Frame (48 bytes) */
#define FRAME_SIZE             48
#define FRAME_SLOT              0   /* where the return address lives      */
#define FRAME_REAL_RETURN       8   /* the address the trampoline replaced */
#define FRAME_SITE             16   /* the site's return address           */
#define FRAME_ENTRY_TICKS      24
#define FRAME_EXIT_TRACERS     32
#define FRAME_MARKS            40

/* struct Ring<RawEvent> (header; the writer owns head, the reader tail) */
#define RING_HEAD               0
#define RING_TAIL              64
#define RING_DROPPED          128   /* u64: events dropped (owner writes) */
#define RING_CAPACITY         168   /* a power of two                      */
#define RING_SLOTS            176
#define RING_FAST_LIMIT       184   /* events at which the generic path   */
                                    /* takes over (lossless: capacity/2)  */

/* struct RawEvent (16 bytes): ticks, then one word packing
 * site (bits 0-47) | depth << 48 (bits 48-62) | exit << 63. */
#define EVENT_SIZE_SHIFT        4
#define EVENT_TICKS             0
#define EVENT_WORD              8
#define EVENT_DEPTH_SHIFT      48
#define EVENT_EXIT_BIT         63

/* EVENT_SLOT ring, head, out: the address of the ring slot for event number
 * `head` (capacity is a power of two). Both fast paths write through it. */
.macro EVENT_SLOT ring, head, out
        movq    RING_CAPACITY(\ring), \out
        decq    \out
        andq    \head, \out
        shlq    $EVENT_SIZE_SHIFT, \out
        addq    RING_SLOTS(\ring), \out
.endm
