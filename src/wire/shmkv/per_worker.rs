//! The `per-worker` design's shared layout and its client end (the worker loops are in
//! `serve::shmkv::per_worker`).
//!
//! The shared-memory hash-table study's proposal: one block per worker, each with an input
//! ring of request cells and an output ring of response cells. A client owns one cell pair
//! of one worker (chosen round-robin on attach); the worker serves its cells in turn, so a
//! worker with one client is a single-producer single-consumer channel, and one with many
//! stays correct. Both sides spin briefly, yield, then park on a futex, so more threads
//! than cores does not collapse. A cell whose owner process died is taken back by its
//! worker; a dead client can only lose its own request.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::msg::{Request, Response};
use super::region::Region;
use super::sync::{futex_wait, futex_wake_all, pid_alive};
use super::ShmkvError;

/// Request/response cells per worker: the most clients one worker takes.
pub const CELLS: usize = 64;
/// Pure spinning before yielding.
pub const SPIN: Duration = Duration::from_micros(4);
/// Spinning with `sched_yield` before parking.
pub const YIELD: Duration = Duration::from_micros(50);
/// A parked worker wakes this often to notice a stop or dead clients (a parked client too).
pub const WORKER_NAP: Duration = Duration::from_millis(20);

/// A block's control line.
#[repr(C, align(64))]
pub struct BlockCtl {
    /// Bumped by a client that finds the worker parked; the worker sleeps on it.
    pub doorbell: AtomicU32,
    /// 1 while the worker is parked on `doorbell`.
    pub worker_parked: AtomicU32,
    /// One past the highest cell ever claimed: the worker scans no further.
    pub cells_used: AtomicU32,
}

/// A request cell of the input ring.
#[repr(C, align(64))]
pub struct InCell {
    /// The process owning the cell, 0 when free.
    pub owner_pid: AtomicI32,
    /// Bumped by the client when `req` holds a new request.
    pub req_seq: AtomicU32,
    /// The request.
    pub req: UnsafeCell<Request>,
}

/// A response cell of the output ring.
#[repr(C, align(64))]
pub struct OutCell {
    /// Set to the request's `req_seq` by the worker once `resp` holds its answer.
    pub resp_seq: AtomicU32,
    /// 1 while the client is parked on `resp_seq`.
    pub client_parked: AtomicU32,
    /// The answer.
    pub resp: UnsafeCell<Response>,
}

/// One worker's block: its control line, its input ring, its output ring.
#[repr(C)]
pub struct Block {
    /// The control line.
    pub ctl: BlockCtl,
    /// The input ring.
    pub input: [InCell; CELLS],
    /// The output ring.
    pub output: [OutCell; CELLS],
}

/// Bytes of one block.
pub fn block_size() -> usize {
    std::mem::size_of::<Block>()
}

/// Worker `i`'s block in a `per-worker` region.
pub fn block(region: &Region, i: usize) -> &Block {
    // SAFETY: blocks are atomics and plain records; the region was sized for them.
    unsafe { region.body::<Block>(i * block_size()) }
}

/// A client's end: one cell pair of one worker.
pub struct Client {
    region: Arc<Region>,
    block: usize,
    cell: usize,
    seq: u32,
    /// The last request was never answered: the cell cannot be handed back safely.
    abandoned: bool,
}

impl Client {
    /// Claims a free cell, starting at the next worker in round-robin order.
    pub fn attach(region: Arc<Region>) -> Result<Client, ShmkvError> {
        let h = region.header();
        let workers = h.num_workers as usize;
        let first = h.next_block.fetch_add(1, Ordering::Relaxed) as usize;
        let pid = std::process::id() as i32;
        for k in 0..workers {
            let w = (first + k) % workers;
            let b = block(&region, w);
            for i in 0..CELLS {
                let claimed = b.input[i]
                    .owner_pid
                    .compare_exchange(0, pid, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok();
                if claimed {
                    b.ctl.cells_used.fetch_max(i as u32 + 1, Ordering::AcqRel);
                    let seq = b.input[i].req_seq.load(Ordering::Acquire);
                    return Ok(Client {
                        region,
                        block: w,
                        cell: i,
                        seq,
                        abandoned: false,
                    });
                }
            }
        }
        Err(ShmkvError::Full {
            clients: workers * CELLS,
        })
    }

    /// Sends one request and waits for its answer, at most `timeout`.
    pub fn call(
        &mut self,
        op: u32,
        key: &[u8],
        value: &[u8],
        timeout: Duration,
    ) -> Result<&Response, ShmkvError> {
        self.send(op, key, value)?;
        self.wait_answer(timeout)?;
        Ok(self.response())
    }

    /// Posts one request without waiting (answered when [`Client::answered`] says so).
    pub fn send(&mut self, op: u32, key: &[u8], value: &[u8]) -> Result<(), ShmkvError> {
        if self.abandoned {
            return Err(ShmkvError::Timeout);
        }
        let b = block(&self.region, self.block);
        let inp = &b.input[self.cell];
        self.seq = self.seq.wrapping_add(1);
        // SAFETY: the cell is ours and the worker has answered everything before.
        unsafe { (*inp.req.get()).fill(op, key, value, self.cell as u32, self.seq as u64) };
        inp.req_seq.store(self.seq, Ordering::SeqCst);
        if b.ctl.worker_parked.load(Ordering::SeqCst) != 0 {
            b.ctl.doorbell.fetch_add(1, Ordering::SeqCst);
            futex_wake_all(&b.ctl.doorbell);
        }
        Ok(())
    }

    /// Waits for the answer to the last request posted, at most `timeout`.
    pub fn wait_answer(&mut self, timeout: Duration) -> Result<(), ShmkvError> {
        let region = self.region.clone();
        self.wait(&block(&region, self.block).output[self.cell], timeout)
    }

    /// Whether the last request posted has its answer.
    pub fn answered(&self) -> bool {
        let out = &block(&self.region, self.block).output[self.cell];
        out.resp_seq.load(Ordering::Acquire) == self.seq
    }

    /// The answer to the last request, once [`Client::answered`].
    pub fn response(&self) -> &Response {
        // SAFETY: published by the worker with release order; it will not write again
        // until our next request.
        unsafe { &*block(&self.region, self.block).output[self.cell].resp.get() }
    }

    /// Gives up on the last request (timed out): the cell stays claimed until exit.
    pub fn abandon(&mut self) {
        self.abandoned = true;
    }

    /// The region this client is attached to.
    pub fn region(&self) -> &Region {
        &self.region
    }

    fn wait(&mut self, out: &OutCell, timeout: Duration) -> Result<(), ShmkvError> {
        let want = self.seq;
        let start = Instant::now();
        let mut n: u32 = 0;
        loop {
            if out.resp_seq.load(Ordering::Acquire) == want {
                return Ok(());
            }
            n = n.wrapping_add(1);
            if n & 31 != 0 {
                std::hint::spin_loop();
                continue;
            }
            let waited = start.elapsed();
            if waited < SPIN {
                continue;
            }
            if waited < YIELD {
                std::thread::yield_now();
                continue;
            }
            let h = self.region.header();
            if h.stopping.load(Ordering::Relaxed) != 0
                || !pid_alive(h.server_pid.load(Ordering::Relaxed))
            {
                return Err(ShmkvError::Stopped);
            }
            if waited >= timeout {
                self.abandoned = true;
                return Err(ShmkvError::Timeout);
            }
            out.client_parked.store(1, Ordering::SeqCst);
            let seen = out.resp_seq.load(Ordering::SeqCst);
            if seen != want {
                futex_wait(&out.resp_seq, seen, (timeout - waited).min(WORKER_NAP));
            }
            out.client_parked.store(0, Ordering::Relaxed);
        }
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        // A cell with a request still pending stays claimed until this process exits:
        // handing it over would let the late answer reach the next owner.
        if !self.abandoned {
            block(&self.region, self.block).input[self.cell]
                .owner_pid
                .store(0, Ordering::Release);
        }
    }
}
