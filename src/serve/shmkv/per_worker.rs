//! The `per-worker` design (the shared-memory hash-table study's proposal): one block per worker, each with an input
//! ring of request cells and an output ring of response cells. A client owns one cell pair
//! of one worker (chosen round-robin on attach); the worker serves its cells in turn, so a
//! worker with one client is a single-producer single-consumer channel, and one with many
//! stays correct. Both sides spin briefly, yield, then park on a futex, so more threads
//! than cores does not collapse. A cell whose owner process died is taken back by its
//! worker; a dead client can only lose its own request.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::table::{serve, Table};
use crate::wire::shmkv::per_worker::{block, Block, CELLS, SPIN, WORKER_NAP, YIELD};
use crate::wire::shmkv::region::Region;
use crate::wire::shmkv::sync::{futex_wait, futex_wake_all, pid_alive};

/// How often a busy worker looks for dead clients.
const REAP_EVERY: Duration = Duration::from_millis(100);

/// Runs worker `index` until `stop`.
pub fn worker_loop(region: Arc<Region>, index: usize, table: Arc<Table>, stop: Arc<AtomicBool>) {
    let b = block(&region, index);
    let mut idle_since: Option<Instant> = None;
    let mut last_reap = Instant::now();
    let mut spins: u32 = 0;
    loop {
        if serve_pending(b, &table) > 0 {
            idle_since = None;
            spins = spins.wrapping_add(1);
            if spins & 4095 == 0 {
                if stop.load(Ordering::Relaxed) {
                    return;
                }
                if last_reap.elapsed() >= REAP_EVERY {
                    reap_dead(b);
                    last_reap = Instant::now();
                }
            }
            continue;
        }
        let since = *idle_since.get_or_insert_with(Instant::now);
        let idle = since.elapsed();
        if idle < SPIN {
            std::hint::spin_loop();
        } else if idle < YIELD {
            std::thread::yield_now();
        } else {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            if last_reap.elapsed() >= REAP_EVERY {
                reap_dead(b);
                last_reap = Instant::now();
            }
            park(b);
            idle_since = None;
        }
    }
}

/// Sleeps until a client rings (or a nap passes). The doorbell is read before the flag is
/// raised and the cells are rescanned, so a ring in between makes the futex return at once.
fn park(b: &Block) {
    let bell = b.ctl.doorbell.load(Ordering::SeqCst);
    b.ctl.worker_parked.store(1, Ordering::SeqCst);
    if !any_pending(b) {
        futex_wait(&b.ctl.doorbell, bell, WORKER_NAP);
    }
    b.ctl.worker_parked.store(0, Ordering::SeqCst);
}

fn any_pending(b: &Block) -> bool {
    let used = (b.ctl.cells_used.load(Ordering::Acquire) as usize).min(CELLS);
    (0..used).any(|i| {
        b.input[i].req_seq.load(Ordering::SeqCst) != b.output[i].resp_seq.load(Ordering::Relaxed)
    })
}

/// Answers every cell holding a new request; how many it answered.
fn serve_pending(b: &Block, table: &Table) -> usize {
    let used = (b.ctl.cells_used.load(Ordering::Acquire) as usize).min(CELLS);
    let mut served = 0;
    for i in 0..used {
        let (inp, out) = (&b.input[i], &b.output[i]);
        let seq = inp.req_seq.load(Ordering::Acquire);
        if seq == out.resp_seq.load(Ordering::Relaxed) {
            continue;
        }
        // SAFETY: the client wrote `req` before publishing `seq` (release/acquire) and
        // does not touch `resp` until we publish it; lengths are checked by `serve`.
        unsafe { serve(table, &*inp.req.get(), &mut *out.resp.get()) };
        out.resp_seq.store(seq, Ordering::SeqCst);
        if out.client_parked.load(Ordering::SeqCst) != 0 {
            futex_wake_all(&out.resp_seq);
        }
        served += 1;
    }
    served
}

/// Frees the cells of clients whose process is gone, dropping any request they left.
pub fn reap_dead(b: &Block) {
    let used = (b.ctl.cells_used.load(Ordering::Acquire) as usize).min(CELLS);
    for i in 0..used {
        let pid = b.input[i].owner_pid.load(Ordering::Acquire);
        if pid != 0 && !pid_alive(pid) {
            let seq = b.input[i].req_seq.load(Ordering::Acquire);
            b.output[i].resp_seq.store(seq, Ordering::Release);
            b.output[i].client_parked.store(0, Ordering::Relaxed);
            b.input[i].owner_pid.store(0, Ordering::Release);
        }
    }
}

/// Wakes every parked client so it sees the server stopping.
pub fn wake_all(region: &Region, workers: usize) {
    for w in 0..workers {
        let b = block(region, w);
        b.ctl.doorbell.fetch_add(1, Ordering::SeqCst);
        futex_wake_all(&b.ctl.doorbell);
        for cell in &b.output {
            futex_wake_all(&cell.resp_seq);
        }
    }
}
