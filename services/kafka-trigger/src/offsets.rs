//! Which offset of a partition may be committed: the at-least-once rule is that an offset is
//! committed only when that record and every earlier record of the partition are done
//! (delivered, dead-lettered or skipped). With concurrency inside a partition (`key` and `none`
//! ordering) records finish out of order, so only the contiguous done prefix counts.

use std::collections::VecDeque;

/// Progress of one assigned partition.
#[derive(Debug, Default)]
pub struct OffsetTracker {
    /// Received records in offset order, with their done flag. Offsets may have gaps
    /// (compaction, transaction markers), so the queue holds the offsets actually seen.
    pending: VecDeque<(i64, bool)>,
    /// The offset to commit: one past the last record of the done prefix.
    committable: Option<i64>,
    /// What the last commit carried.
    committed: Option<i64>,
    /// One past the last received record.
    next_expected: Option<i64>,
}

impl OffsetTracker {
    pub fn new() -> Self {
        Self::default()
    }

    /// A record was handed to delivery. Offsets must increase; a repeated or older offset
    /// (a redelivery after seeking back) is ignored because it is already tracked.
    pub fn received(&mut self, offset: i64) -> bool {
        if self.next_expected.is_some_and(|n| offset < n) {
            return false;
        }
        self.pending.push_back((offset, false));
        self.next_expected = Some(offset + 1);
        true
    }

    /// A record is done. Returns whether the committable offset moved.
    pub fn done(&mut self, offset: i64) -> bool {
        let Ok(i) = self.pending.binary_search_by_key(&offset, |(o, _)| *o) else {
            return false;
        };
        self.pending[i].1 = true;
        let mut moved = false;
        while let Some(&(o, true)) = self.pending.front() {
            self.pending.pop_front();
            self.committable = Some(o + 1);
            moved = true;
        }
        moved
    }

    /// The offset a commit should carry now (`None` before the first record is done).
    pub fn committable(&self) -> Option<i64> {
        self.committable
    }

    /// The committable offset if it moved since the last call; records it as committed.
    pub fn take_commit(&mut self) -> Option<i64> {
        match self.committable {
            Some(c) if self.committed != Some(c) => {
                self.committed = Some(c);
                Some(c)
            }
            _ => None,
        }
    }

    /// Forgets that the last commit went through (it failed), so the next round retries it.
    pub fn commit_failed(&mut self, offset: i64) {
        if self.committed == Some(offset) {
            self.committed = None;
        }
    }

    /// Records received and not done yet.
    pub fn outstanding(&self) -> usize {
        self.pending.iter().filter(|(_, done)| !done).count()
    }

    /// The consumer's position for lag: the oldest record not done, else one past the last
    /// received record.
    pub fn position(&self) -> Option<i64> {
        self.pending
            .front()
            .map(|(o, _)| *o)
            .or(self.committable)
            .or(self.next_expected)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_order_completion_advances_one_by_one() {
        let mut t = OffsetTracker::new();
        for o in 10..13 {
            assert!(t.received(o));
        }
        assert_eq!(t.committable(), None);
        assert_eq!(t.position(), Some(10));
        assert!(t.done(10));
        assert_eq!(t.committable(), Some(11));
        assert_eq!(t.take_commit(), Some(11));
        assert_eq!(t.take_commit(), None, "nothing new to commit");
        assert!(t.done(11));
        assert!(t.done(12));
        assert_eq!(t.take_commit(), Some(13));
        assert_eq!(t.outstanding(), 0);
        assert_eq!(t.position(), Some(13));
    }

    #[test]
    fn out_of_order_completion_commits_only_the_contiguous_prefix() {
        let mut t = OffsetTracker::new();
        for o in [0, 1, 2, 5, 6] {
            t.received(o); // 3 and 4 are a gap (compacted away)
        }
        assert!(!t.done(2), "2 done but 0 and 1 are not");
        assert!(!t.done(6));
        assert_eq!(t.committable(), None);
        assert_eq!(t.outstanding(), 3);
        assert!(t.done(0));
        assert_eq!(t.committable(), Some(1));
        assert!(t.done(1));
        assert_eq!(t.committable(), Some(3), "0,1,2 done; 5 is next");
        assert_eq!(t.position(), Some(5));
        assert!(t.done(5));
        assert_eq!(t.committable(), Some(7), "6 was already done");
    }

    #[test]
    fn unknown_and_repeated_offsets_are_ignored() {
        let mut t = OffsetTracker::new();
        t.received(4);
        assert!(!t.received(3), "older than what was received");
        assert!(!t.received(4), "already tracked");
        assert!(!t.done(99));
        assert!(t.done(4));
        assert!(!t.done(4), "done twice");
        assert_eq!(t.committable(), Some(5));
    }

    #[test]
    fn a_failed_commit_is_retried() {
        let mut t = OffsetTracker::new();
        t.received(0);
        t.done(0);
        assert_eq!(t.take_commit(), Some(1));
        t.commit_failed(1);
        assert_eq!(t.take_commit(), Some(1));
        // a stale failure report does not undo a newer commit
        t.received(1);
        t.done(1);
        assert_eq!(t.take_commit(), Some(2));
        t.commit_failed(1);
        assert_eq!(t.take_commit(), None);
    }
}
