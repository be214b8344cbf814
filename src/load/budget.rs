//! What a generator thread's connections may hold, together, of replies not yet whole.
//!
//! A per-connection cap alone is no bound: 64 MiB × 10,000 connections of a hostile server is
//! 640 GB. The thread has a budget (`--reply-budget-mib`, 256 MiB by default): half of it is
//! split evenly, each connection's share that it may always hold whatever the others do;
//! the other half is lent, first come, to connections whose reply outgrows their share. A
//! connection that needs more than its share when the pool is spent fails its reply with
//! `reply_over_budget` (and is reopened, freeing what it held); one reply over the
//! per-connection cap is `reply_too_large`. What the thread holds is at most its budget.
use crate::record::load::RequestError;

/// Most bytes one connection may hold of a reply not yet whole: a server sending an endless
/// body or endless headers costs this much at most, then the connection is reset with
/// `reply_too_large`.
pub(crate) const MAX_REPLY_BYTES: usize = 64 * 1024 * 1024;
/// A thread's budget when none is given.
pub const DEFAULT_REPLY_BUDGET_BYTES: usize = 256 * 1024 * 1024;

/// One thread's accounts of its connections' reply buffers.
#[derive(Debug)]
pub(super) struct ReplyBudget {
    /// What each connection may hold whatever the others hold.
    share_bytes: usize,
    /// Lent, first come, to connections holding more than their share.
    pool_bytes: usize,
    /// Of the pool, lent now.
    lent_bytes: usize,
    /// Most one connection may hold.
    conn_max_bytes: usize,
}

impl ReplyBudget {
    /// `thread_bytes` for `conns` connections.
    pub fn new(thread_bytes: usize, conns: usize) -> Self {
        let share_bytes = thread_bytes / 2 / conns.max(1);
        ReplyBudget {
            share_bytes,
            pool_bytes: thread_bytes - share_bytes * conns.max(1),
            lent_bytes: 0,
            conn_max_bytes: MAX_REPLY_BYTES.min(thread_bytes),
        }
    }

    fn lent(&self, held: usize) -> usize {
        held.saturating_sub(self.share_bytes)
    }

    /// The capacity a connection holding `held` bytes may grow its buffer to, to hold `need`:
    /// `hope` (amortised growth) when the budget allows it, else the most it allows; the
    /// error kind when `need` itself is not allowed.
    pub fn grow(&self, held: usize, need: usize, hope: usize) -> Result<usize, RequestError> {
        if need > self.conn_max_bytes {
            return Err(RequestError::ReplyTooLarge);
        }
        let free = self.pool_bytes - self.lent_bytes + self.lent(held);
        let most = (self.share_bytes + free).min(self.conn_max_bytes);
        if need > most {
            return Err(RequestError::ReplyOverBudget);
        }
        Ok(hope.clamp(need, most))
    }

    /// Records that a connection's buffer went from `before` to `after` bytes.
    pub fn held(&mut self, before: usize, after: usize) {
        self.lent_bytes = self.lent_bytes - self.lent(before) + self.lent(after);
    }

    /// Of the pool, lent now (tests).
    #[cfg(test)]
    pub fn lent_bytes(&self) -> usize {
        self.lent_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1024 * 1024;

    #[test]
    fn a_few_connections_keep_the_per_connection_cap() {
        let b = ReplyBudget::new(DEFAULT_REPLY_BUDGET_BYTES, 4);
        assert_eq!(b.grow(0, MAX_REPLY_BYTES, 0), Ok(MAX_REPLY_BYTES));
        assert_eq!(
            b.grow(0, MAX_REPLY_BYTES + 1, 0),
            Err(RequestError::ReplyTooLarge)
        );
        // Growth hoped for beyond the cap is clamped to it.
        assert_eq!(b.grow(40 * MIB, 41 * MIB, 80 * MIB), Ok(MAX_REPLY_BYTES));
    }

    #[test]
    fn the_thread_never_holds_more_than_its_budget() {
        // 16 MiB for 16 connections: a share of 0.5 MiB each, a pool of 8 MiB.
        let mut b = ReplyBudget::new(16 * MIB, 16);
        let mut held = [0usize; 16];
        // Every connection grows 64 KiB at a time until refused.
        let mut refused = [false; 16];
        for _ in 0..1000 {
            for c in 0..16 {
                if refused[c] {
                    continue;
                }
                let h = held[c];
                match b.grow(h, h + 64 * 1024, h * 2) {
                    Ok(cap) => {
                        assert!(cap >= h + 64 * 1024);
                        b.held(h, cap);
                        held[c] = cap;
                    }
                    Err(kind) => {
                        assert_eq!(kind, RequestError::ReplyOverBudget);
                        refused[c] = true;
                    }
                }
                assert!(held.iter().sum::<usize>() <= 16 * MIB);
            }
        }
        assert!(refused.iter().all(|&r| r));
        // Each got at least its share before being refused.
        assert!(held.iter().all(|&h| h >= MIB / 2), "{held:?}");
        // One connection freeing its buffer gives back what it had borrowed.
        let before = b.lent_bytes();
        let most = *held.iter().max().unwrap();
        b.held(most, 0);
        assert_eq!(b.lent_bytes(), before - (most - MIB / 2));
        assert!(b.grow(0, MIB, 0).is_ok());
    }

    #[test]
    fn a_share_is_kept_whatever_the_others_borrow() {
        let mut b = ReplyBudget::new(8 * MIB, 4);
        // One connection takes the whole pool (8 MiB - 4 × 1 MiB).
        let cap = b.grow(0, 5 * MIB, 0).unwrap();
        assert_eq!(cap, 5 * MIB);
        b.held(0, cap);
        assert_eq!(b.grow(0, MIB, 0), Ok(MIB));
        assert_eq!(b.grow(0, MIB + 1, 0), Err(RequestError::ReplyOverBudget));
    }
}
