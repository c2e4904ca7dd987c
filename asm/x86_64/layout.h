/*
 * Byte offsets of the Rust structures the trampolines read and write.
 * Each is asserted at compile time on the Rust side (const blocks next to
 * the structures: ThreadBlock in src/rt/thread.rs, ShadowStack and Frame in
 * src/rt/shadow/mod.rs, Ring in src/rt/ring/mod.rs, RawEvent in
 * src/builtin/graph/mod.rs, the profile Block in src/builtin/profile/block/mod.rs,
 * SavedRegs in src/arch/x86_64/mod.rs), so the two sides cannot drift apart
 * silently.
 */

/* struct SavedRegs (192 bytes, 16-byte aligned): the registers entry.S
 * saves at %rsp before calling into Rust, which receives a pointer to it. */
#define SAVED_RDI               0
#define SAVED_RSI               8
#define SAVED_RDX              16
#define SAVED_RCX              24
#define SAVED_R8               32
#define SAVED_R9               40
#define SAVED_RAX              48
#define SAVED_R10              56
#define SAVED_XMM              64   /* [u128; 8]: xmm0-xmm7, 16 bytes each */
#define SAVED_REGS_SIZE       192

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
#define THREAD_PROFILE_BLOCK   64   /* the profile tracer's block, or null */
#define THREAD_BLOCK_SIZE      72

/* struct ShadowStack { len: usize, frames: [Frame; MAX_DEPTH] } */
#define SHADOW_LEN              0
#define SHADOW_FRAMES           8
#define SHADOW_MAX_DEPTH     1024

/* struct Frame (64 bytes) */
#define FRAME_SIZE             64
#define FRAME_SLOT              0   /* where the return address lives      */
#define FRAME_REAL_RETURN       8   /* the address the trampoline replaced */
#define FRAME_SITE             16   /* the site's return address           */
#define FRAME_ENTRY_TICKS      24
#define FRAME_EXIT_TRACERS     32
#define FRAME_MARKS            40
#define FRAME_HOOK             48   /* what was written into the slot: the */
                                    /* trampoline, or a return stub's hook */
#define FRAME_KEPT             56   /* an argument kept for the exit (0:   */
                                    /* none): args::Kept, packed as below  */

/* A return stub (src/patch/return_stubs.rs: the layout is drawn there), as
 * the fast entry it calls sees it from its return address R = stub + 6:
 * the hook the function is to return to (the stub's own exit path), and
 * the word holding the end of the site's instruction (where the function
 * goes on). Every hook lies at STUB_HOOK_IN_LINE in a 64-byte line of a
 * stub arena (fntrace_return_stub_arenas, return.S). */
#define STUB_HOOK_FROM_RETURN       5
#define STUB_SITE_END_FROM_RETURN  50
#define STUB_HOOK_IN_LINE          11
#define STUB_ARENAS                 4

/* JUMP_IF_STUB_HOOK value, scratch, label: to label when `value` is some
 * return stub's hook (at STUB_HOOK_IN_LINE of a line in an arena). An
 * arena not in use is (0, 0) and holds nothing. */
.macro JUMP_IF_STUB_HOOK value, scratch, label
        movq    \value, \scratch
        andq    $63, \scratch
        cmpq    $STUB_HOOK_IN_LINE, \scratch
        jne     .Lnot_stub_hook_\@
        .irp    arena, 0, 1, 2, 3
        movq    \value, \scratch
        subq    fntrace_return_stub_arenas+16*\arena(%rip), \scratch
        cmpq    fntrace_return_stub_arenas+16*\arena+8(%rip), \scratch
        jb      \label
        .endr
.Lnot_stub_hook_\@:
.endm

/* For the fast entries (graph.S, profile.S): 64(%rsp) is their return
 * address once their eight registers are saved (their SITE_RETURN; `at`
 * for the argument entries, which save nine).
 *
 * HOOK_ADDRESS stubbed, out: what the slot gets, the trampoline or, for
 * an entry called from a return stub, the stub's hook. */
.macro HOOK_ADDRESS stubbed, out, at=64
.if \stubbed
        movq    \at(%rsp), \out
        addq    $STUB_HOOK_FROM_RETURN, \out
.else
        leaq    fntrace_return_trampoline(%rip), \out
.endif
.endm

/* SITE_END stubbed, out: the end of the site's instruction (its return
 * address), read from the return stub for an entry called from one. */
.macro SITE_END stubbed, out, at=64
        movq    \at(%rsp), \out
.if \stubbed
        movq    STUB_SITE_END_FROM_RETURN(\out), \out
.endif
.endm

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
#define EVENT_MORE_BIT         62   /* data slots follow (args::MORE)     */
#define EVENT_DATA_DEPTH    32767   /* a data slot's depth field          */

/* The graph tracer's argument entries (graph.S, args = 1) and the fast
 * exit's return value (return.S): src/builtin/graph/arg_recipes.rs.
 * struct Recipes: the current table's header. */
#define RECIPES_MASK            0   /* buckets - 1                        */
#define RECIPES_ENTRIES         8   /* *const Recipe: buckets, then more  */
                                    /* entries and an empty one (no wrap) */
#define RECIPE_HASH_MULTIPLIER 0x9E3779B97F4A7C15
#define RECIPE_HASH_SHIFT      32   /* bucket: (key * multiplier) >> 32 & mask */
/* struct Recipe (128 bytes): one site's values */
#define RECIPE_SIZE_SHIFT       7
#define RECIPE_KEY              0   /* the site's end; 0: empty           */
#define RECIPE_MARKS            8   /* the frame's marks (0: no retval)   */
#define RECIPE_EVENTS          16   /* 1 + data slots at the entry        */
#define RECIPE_OPS             24   /* u32: values at the entry (0-6)     */
#define RECIPE_PIN             28   /* u32: a poll's future: its argument */
                                    /* (1-6) | the state's offset << 8;   */
                                    /* 0: none                            */
#define RECIPE_OP              32   /* [RecipeOp; 6]                      */
/* struct RecipeOp (16 bytes): one argument's value */
#define OP_SIZE_SHIFT           4
#define OP_MASK                 0   /* its size's bytes                   */
#define OP_FROM                 8   /* i32: the argument, 0-based; or    */
                                    /* PINNED_STATE_FROM                  */
#define OP_TO                  12   /* u32: its byte offset in the data   */
/* A frame's marks when the fast exit records its return value: the top
 * bit (ARGS_MARK) and MARK_FAST_RETVAL_BIT, the value's shift (64 - its
 * bits: the value is rax << shift >> shift) at MARK_RETVAL_SHIFT_AT,
 * nothing else. */
#define MARK_ARGS_BIT          63
#define MARK_FAST_RETVAL_BIT   62
#define MARK_RETVAL_SHIFT_AT   56
/* A poll's frame, whose fast exit records its future's state and links
 * the poll (return.S, `.Lpoll`): the top bit (ARGS_MARK), the table's
 * index of its function's futures plus one (16 bits, never 0) at
 * MARK_POLL_KEY_AT, the state's offset in the future (24 bits) at
 * MARK_POLL_OFFSET_AT; MARK_POLL_CLEAR (MARK_FAST_RETVAL_BIT and the
 * tracers' own marks, bits 0-15) clear. An offset of POLL_FROM_RAX is a
 * hand-written poll's: no state, the value recorded is rax masked by the
 * shift at MARK_RETVAL_SHIFT_AT (its Poll's discriminant). */
#define MARK_POLL_KEY_AT       16
#define MARK_POLL_OFFSET_AT    32
#define MARK_POLL_CLEAR        0x400000000000ffff
#define POLL_FROM_RAX          0xffffff

/* A poll's future (RECIPE_PIN): the argument entry reads its state byte
 * and keeps it in the red zone below the saved registers, where the op
 * whose FROM is PINNED_STATE_FROM reads it as the data's value
 * (PINNED_STATE_AT = 8 * PINNED_STATE_FROM), and writes the word it keeps
 * in the frame (FRAME_KEPT) at KEPT_AT. The data itself lies at -48..-1. */
/* A RECIPE_PIN offset of PIN_KEEP_ONLY: the argument is kept, nothing
 * loaded through it (a hand-written poll's future). */
#define PIN_KEEP_ONLY          0xffffff
#define PINNED_STATE_FROM      -9
#define PINNED_STATE_AT       -72
#define KEPT_AT               -64
/* A kept word (args::Kept): the argument's value in bits 0-46, the bit of
 * a poll that began its future (state Unresumed), N - 1 from
 * KEPT_ARG_SHIFT, KEPT_SET_BIT set. Values from KEPT_USER_END on (and
 * below one page) are not user addresses: the entry bails. */
#define KEPT_FUTURE_BIT        47
#define KEPT_ARG_SHIFT         48
#define KEPT_SET_BIT           63
#define KEPT_USER_END   0x7ffffffff000

/* EVENT_SLOT ring, head, out: the address of the ring slot for event number
 * `head` (capacity is a power of two). Both fast paths write through it. */
.macro EVENT_SLOT ring, head, out
        movq    RING_CAPACITY(\ring), \out
        decq    \out
        andq    \head, \out
        shlq    $EVENT_SIZE_SHIFT, \out
        addq    RING_SLOTS(\ring), \out
.endm

/* The profile tracer's per-thread block (src/builtin/profile/block/mod.rs):
 * struct Block { header: Header (one page), open, table, rows, nodes,
 * chunks }. */
#define PB_ERA                 24   /* u64: the era its open calls belong to */
#define PB_OPEN                44   /* u32: open calls                      */
#define PB_PATHS_NOT_KEPT      48   /* u64                                  */
#define PB_PENDING             64   /* u64: (row + 1) << 48 | duration ns   */
#define PB_PATH_MASK           72   /* u64: path slots in use - 1, << 4     */
#define PENDING_ROW_SHIFT      48
#define BLOCK_OPEN           4096   /* [Open; SHADOW_MAX_DEPTH]             */
#define BLOCK_TABLE         36864   /* [TableSlot; 1 << PROFILE_TABLE_BITS] */
#define BLOCK_PATHS        167936   /* [PathSlot; 1 << PROFILE_PATH_TABLE_BITS] */
#define BLOCK_ROWS         692224   /* [Row; 4096]                          */
#define BLOCK_NODES       1478656   /* [Node; 16384]                        */
#define BLOCK_CHUNKS      2002944   /* [[u64; CHUNK_BUCKETS]; 4096]         */

/* struct Open (32 bytes): one call entered and not returned */
#define OPEN_SIZE_SHIFT         5
#define OPEN_SIZE              32
#define OPEN_ROW                0   /* u32 */
#define OPEN_NODE               4   /* u32 */
#define OPEN_DEPTH              8   /* u32 */
#define OPEN_ENTRY_TICKS       16
#define OPEN_CHILDREN_NS       24

/* struct TableSlot (16 bytes): site -> row, open addressing */
#define TABLE_SLOT_SIZE_SHIFT        4
#define TABLE_SITE              0
#define TABLE_ROW               8   /* u32 */
#define PROFILE_TABLE_BITS     13
#define PROFILE_HASH_MULTIPLIER 0x9E3779B97F4A7C15

/* struct PathSlot (16 bytes): (site, parent node) -> (row, node), open
 * addressing with the same multiplier */
#define PATH_SLOT_SIZE_SHIFT    4
#define PATH_KEY                0   /* site | (parent + 1) << 48; 0: empty */
#define PATH_VALUE              8   /* row | node << 32                     */
#define PROFILE_PATH_TABLE_BITS 15

/* struct Row (192 bytes: three cache lines): one function's counters */
#define ROW_SIZE              192
#define ROW_TOTAL               8
#define ROW_SELF_NS               16
#define ROW_SUM                24
#define ROW_MIN_INVERTED       32
#define ROW_MAX                40
#define ROW_ACTIVE             48   /* u32 */
#define ROW_CHUNKS             52   /* [u16; 58]: chunk number plus one     */

/* struct Node (32 bytes): a call-trie node */
#define NODE_SIZE_SHIFT         5
#define NODE_ROW                0   /* u32 */
#define NODE_CALLS              8
#define NODE_TOTAL             16
#define NODE_SELF_NS           24

/* Histogram chunks: 128 u64 counters (1024 bytes) each. */
#define CHUNK_BUCKETS         128
#define CHUNK_SHIFT            10
#define PROFILE_NONE   0xffffffff   /* no row / no node */
