//! The table's rule on one thread, and its counts under many threads
//! polling many futures that move between them.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use super::*;
use fntrace_format::coroutine::{PANICKED, RETURNED, UNRESUMED};

/// A poll that began in `state_in`, as `FutureTable::poll` takes it.
fn poll(
    function: u16,
    address: u64,
    state_in: u64,
    state_out: u64,
    at: u64,
    tid: u32,
) -> (Poll, u64) {
    let poll = Poll {
        function,
        address,
        state_out,
        entry_ticks: at,
        exit_ticks: at + 10,
        tid,
    };
    (poll, state_in)
}

impl FutureTable {
    fn poll_of(&self, (poll, state_in): (Poll, u64)) -> Linked {
        self.poll(&poll, state_in)
    }
}

/// Each way a future goes through the table, as the offline linker's
/// test has them.
#[test]
fn polls_link_as_offline() {
    let table = FutureTable::new(64);
    assert_eq!(
        table.poll_of(poll(0, 0xa0, UNRESUMED, 3, 100, 1)),
        Linked::Pending
    );
    assert_eq!(table.poll_of(poll(0, 0xa0, 3, 4, 200, 2)), Linked::Pending);
    // Another function's future at the same address is another future.
    assert_eq!(
        table.poll_of(poll(1, 0xa0, UNRESUMED, 3, 210, 1)),
        Linked::Pending
    );
    let Linked::Ended(a) = table.poll_of(poll(0, 0xa0, 4, RETURNED, 300, 1)) else {
        panic!("A ends at its Returned poll");
    };
    assert_eq!(
        a,
        Ended {
            end: PollEnd::Ready,
            first_ticks: 100,
            end_ticks: 310,
            busy_ticks: 30,
            polls: 3,
            tids: [1, 2, 0, 0],
            more_tids: false,
        }
    );
    // B left pending, a new future at its address: B was dropped.
    table.poll_of(poll(0, 0xb0, UNRESUMED, 3, 110, 1));
    assert_eq!(table.dropped(), 0);
    let Linked::Ended(b) = table.poll_of(poll(0, 0xb0, UNRESUMED, RETURNED, 400, 1)) else {
        panic!("the new future at B's address is Ready in one poll");
    };
    assert_eq!((b.first_ticks, b.polls), (400, 1));
    assert_eq!(table.dropped(), 1);
    // C first polled before: not known; D panicked.
    assert_eq!(
        table.poll_of(poll(0, 0xc0, 3, RETURNED, 120, 1)),
        Linked::Unknown
    );
    let Linked::Ended(d) = table.poll_of(poll(0, 0xd0, UNRESUMED, PANICKED, 130, 1)) else {
        panic!("D ends");
    };
    assert_eq!(d.end, PollEnd::Panicked);
    // Only the other function's future is left.
    assert_eq!(table.live(), 1);
    assert_eq!(table.untracked(), 0);
}

/// A future's drop frees its slot if it was pending, and only its own
/// function's future at that address; a drop after Ready finds nothing.
#[test]
fn drops_free_pending_futures() {
    let table = FutureTable::new(64);
    table.poll_of(poll(0, 0xa0, UNRESUMED, 3, 100, 1));
    table.poll_of(poll(1, 0xa0, UNRESUMED, 3, 110, 1));
    assert_eq!(table.live(), 2);
    assert!(table.dropped_at(0, 0xa0));
    assert_eq!((table.live(), table.dropped()), (1, 1));
    // Its later poll (none should come) finds no future.
    assert_eq!(table.poll_of(poll(0, 0xa0, 3, 4, 200, 1)), Linked::Unknown);
    let Linked::Ended(_) = table.poll_of(poll(1, 0xa0, 3, RETURNED, 300, 1)) else {
        panic!("the other function's future is still followed");
    };
    assert!(!table.dropped_at(1, 0xa0), "dropped after Ready");
    assert_eq!((table.live(), table.dropped()), (0, 1));
    // A new first poll at the address takes a freed slot again.
    table.poll_of(poll(0, 0xa0, UNRESUMED, 3, 400, 1));
    assert_eq!(table.live(), 1);
}

/// Specs replaced: futures left pending under the old ones (their
/// block's indices) are never found again, not counted as live, and their
/// slots are claimed by the new block's futures, even in a full table.
#[test]
fn futures_of_an_old_block_are_stale_and_their_slots_free() {
    let table = FutureTable::new(MAX_PROBE);
    let old = table.begin_block(2);
    for i in 0..MAX_PROBE as u64 {
        let linked = table.poll_of(poll(old, 0x1000 + i * 64, UNRESUMED, 3, i, 1));
        assert_eq!(linked, Linked::Pending, "future {i}");
    }
    assert_eq!(table.live(), MAX_PROBE);
    let new = table.begin_block(2);
    assert_ne!(new, old);
    assert_eq!(table.live(), 0);
    // The later poll of an old future (or of a new one at its address that
    // began under the old specs) finds nothing.
    assert_eq!(
        table.poll_of(poll(new, 0x1000, 3, RETURNED, 200, 1)),
        Linked::Unknown
    );
    for i in 0..MAX_PROBE as u64 {
        let linked = table.poll_of(poll(new, 0x1000 + i * 64, UNRESUMED, 3, 300 + i, 1));
        assert_eq!(linked, Linked::Pending, "new future {i}");
    }
    assert_eq!(
        (table.live(), table.untracked(), table.dropped()),
        (MAX_PROBE, 0, 0)
    );
    let Linked::Ended(ended) = table.poll_of(poll(new, 0x1040, 3, RETURNED, 400, 2)) else {
        panic!("not ended");
    };
    assert_eq!((ended.polls, ended.first_ticks), (2, 301));
    // Blocks wrap to the start once the indices run out.
    let blocks = (0..3)
        .map(|_| table.begin_block(MAX_FUNCTIONS / 2))
        .collect::<Vec<_>>();
    assert_eq!(blocks, [4, 0, MAX_FUNCTIONS as u16 / 2]);
}

/// A full table: first polls beyond its slots go untracked, counted, and
/// their later polls are unknown; once a slot is freed it is claimed again.
#[test]
fn a_full_table_counts_untracked_futures() {
    let table = FutureTable::new(MAX_PROBE);
    assert_eq!(table.capacity(), MAX_PROBE);
    for i in 0..MAX_PROBE as u64 {
        let linked = table.poll_of(poll(0, 0x1000 + i * 64, UNRESUMED, 3, i, 1));
        assert_eq!(linked, Linked::Pending, "future {i}");
    }
    assert_eq!(
        table.poll_of(poll(0, 0x9000, UNRESUMED, 3, 99, 1)),
        Linked::Untracked
    );
    assert_eq!(
        table.poll_of(poll(0, 0x9000, 3, RETURNED, 120, 1)),
        Linked::Unknown
    );
    assert_eq!(table.untracked(), 1);
    assert!(matches!(
        table.poll_of(poll(0, 0x1000, 3, RETURNED, 130, 1)),
        Linked::Ended(_)
    ));
    assert_eq!(
        table.poll_of(poll(0, 0x9000, UNRESUMED, 3, 140, 1)),
        Linked::Pending
    );
    assert_eq!(table.live(), MAX_PROBE);
}

/// THREADS threads poll FUTURES futures of POLLS polls each, taking them
/// from one queue (as an executor's workers do: a future's polls run on
/// whichever thread takes it), at most LIVE pending at a time, addresses
/// reused as an allocator reuses them: every future ends exactly once
/// with exactly its polls, on the threads that polled it.
fn stress(slots: usize, live: usize) -> (u64, u64, u64) {
    const THREADS: u32 = 8;
    const FUTURES: u64 = 40_000;
    const POLLS: u64 = 5;
    let table = Arc::new(FutureTable::new(slots));
    // (address, function, polls done, the threads so far)
    type Queued = (u64, u16, u64, Vec<u32>);
    // The futures pending, how many were started, the free addresses.
    type Queue = (VecDeque<Queued>, u64, Vec<u64>);
    let queue: Arc<Mutex<Queue>> = Arc::new(Mutex::new((VecDeque::new(), 0, Vec::new())));
    {
        let mut q = queue.lock().unwrap();
        // Free addresses, reused.
        q.2 = (0..live as u64)
            .map(|i| 0x7f00_0000_0000 + i * 0x140)
            .collect();
    }
    let workers: Vec<_> = (0..THREADS)
        .map(|n| {
            let (table, queue) = (Arc::clone(&table), Arc::clone(&queue));
            std::thread::spawn(move || {
                let tid = 1000 + n;
                let (mut ended, mut untracked, mut tracked_polls) = (0u64, 0u64, 0u64);
                let mut clock = u64::from(n) << 40;
                loop {
                    let job = {
                        let mut q = queue.lock().unwrap();
                        let (pending, started, free) = &mut *q;
                        // New futures first, while addresses are free:
                        // LIVE are pending at once.
                        match free.pop() {
                            Some(address) if *started < FUTURES => {
                                *started += 1;
                                Some((address, (*started % 3) as u16, 0, Vec::new()))
                            }
                            other => {
                                if let Some(address) = other {
                                    free.push(address);
                                }
                                match pending.pop_front() {
                                    Some(job) => Some(job),
                                    None if *started < FUTURES => None,
                                    None => break,
                                }
                            }
                        }
                    };
                    let Some((address, function, done, mut tids)) = job else {
                        std::thread::yield_now();
                        continue;
                    };
                    let state_in = if done == 0 { UNRESUMED } else { 2 + done };
                    let last = done + 1 == POLLS;
                    let state_out = if last { RETURNED } else { 3 + done };
                    clock += 100;
                    let polled = Poll {
                        function,
                        address,
                        state_out,
                        entry_ticks: clock,
                        exit_ticks: clock + 7,
                        tid,
                    };
                    let linked = table.poll(&polled, state_in);
                    if !tids.contains(&tid) {
                        tids.push(tid);
                    }
                    match linked {
                        Linked::Pending => tracked_polls += 1,
                        Linked::Ended(e) => {
                            tracked_polls += 1;
                            ended += 1;
                            assert!(last, "ended at poll {}", done + 1);
                            assert_eq!((e.polls, e.busy_ticks), (POLLS, POLLS * 7));
                            assert_eq!(e.end, PollEnd::Ready);
                            let named: Vec<u32> =
                                e.tids.iter().copied().filter(|&t| t != 0).collect();
                            let expected = &tids[..tids.len().min(TIDS)];
                            assert_eq!(named, expected);
                            assert_eq!(e.more_tids, tids.len() > TIDS);
                        }
                        Linked::Untracked => {
                            assert_eq!(done, 0);
                            untracked += 1;
                        }
                        Linked::Unknown => assert!(done > 0),
                    }
                    let mut q = queue.lock().unwrap();
                    if last {
                        q.2.push(address);
                    } else {
                        q.0.push_back((address, function, done + 1, tids));
                    }
                }
                (ended, untracked, tracked_polls)
            })
        })
        .collect();
    let (mut ended, mut untracked, mut polls) = (0, 0, 0);
    for worker in workers {
        let (e, u, p) = worker.join().unwrap();
        ended += e;
        untracked += u;
        polls += p;
    }
    assert_eq!(
        ended + untracked,
        FUTURES,
        "every future ended or went untracked"
    );
    assert_eq!(polls, ended * POLLS, "the tracked futures' polls");
    assert_eq!(table.untracked(), untracked);
    assert_eq!(table.dropped(), 0);
    assert_eq!(table.live(), 0, "every tracked future freed its slot");
    (ended, untracked, polls)
}

/// 8 threads, 40,000 futures of 5 polls each, 256 pending at a time in a
/// table of 4,096: all tracked, 200,000 polls linked.
#[test]
fn many_threads_many_futures_all_tracked() {
    assert_eq!(stress(4096, 256), (40_000, 0, 200_000));
}

/// The same with 512 pending at a time in 64 slots: many go untracked,
/// and tracked plus untracked is still every future, exactly.
#[test]
fn many_threads_many_futures_full_table() {
    let (ended, untracked, _) = stress(64, 512);
    assert!(
        untracked > 0 && ended > 0,
        "{ended} ended, {untracked} untracked"
    );
}

/// What linking costs a poll: 1,000 futures pending, 5 polls each, one
/// thread, 1,000,000 polls (a measurement: `cargo test -p fntrace --lib
/// table_cost -- --ignored --nocapture`; under 1 µs a poll, far under
/// the 5 µs the values' reads take).
#[test]
#[ignore]
fn table_cost() {
    let table = FutureTable::new(super::super::TABLE_SLOTS);
    let (polls, live) = (1_000_000u64, 1_000u64);
    let start = std::time::Instant::now();
    for i in 0..polls {
        let address = 0x7f00_0000_0000 + (i % live) * 0x140;
        let step = (i / live) % 5;
        let state_in = if step == 0 { UNRESUMED } else { 2 + step };
        let state_out = if step == 4 { RETURNED } else { 3 + step };
        std::hint::black_box(table.poll_of(poll(0, address, state_in, state_out, i, 1)));
    }
    let ns = start.elapsed().as_nanos() as f64 / polls as f64;
    eprintln!("{ns:.1} ns a poll ({polls} polls, {live} futures pending)");
    assert!(ns < 1000.0, "{ns} ns a poll");
    assert_eq!(table.live(), 0);
}
