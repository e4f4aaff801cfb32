//! Pure shard bookkeeping: what a checkpoint value means, and which shards of a listing may be
//! read now (a child only after its parents are drained, so records of one partition key stay
//! in order across a split or merge).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use kubeless_api::triggers::StartingPosition;

/// One shard as ListShards reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardInfo {
    pub id: String,
    pub parent: Option<String>,
    pub adjacent_parent: Option<String>,
    /// Has an ending sequence number: no new records will arrive (split or merged away).
    pub closed: bool,
    /// The ending sequence number of a closed shard (its last record).
    pub ending: Option<String>,
}

/// Compares Kinesis sequence numbers (decimal strings of up to 128 bits, no leading zeros).
pub fn seq_less(a: &str, b: &str) -> bool {
    (a.len(), a) < (b.len(), b)
}

/// What the checkpoint ConfigMap says about one shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Checkpoint {
    /// Everything up to and including this sequence number is done (delivered or
    /// dead-lettered). Resume AFTER_SEQUENCE_NUMBER.
    After(String),
    /// Reading began at this time (milliseconds since the epoch) and nothing was done yet.
    /// Written when a shard starts from LATEST or AT_TIMESTAMP, so that a restart before the
    /// first record resumes AT_TIMESTAMP instead of jumping to a later LATEST (which would
    /// lose what arrived in between).
    At(i64),
    /// A closed shard read to its end: its children may start.
    End,
    /// A closed shard passed over because the trigger starts at LATEST: counts as drained,
    /// but its children start from the trigger's position, not from their beginning.
    Skipped,
}

const END: &str = "SHARD_END";
const SKIPPED: &str = "SKIPPED";
const AT_PREFIX: &str = "at:";

impl Checkpoint {
    /// Parses a ConfigMap value; `None` for a value we did not write.
    pub fn parse(value: &str) -> Option<Self> {
        let v = value.trim();
        match v {
            END => Some(Self::End),
            SKIPPED => Some(Self::Skipped),
            _ => {
                if let Some(ms) = v.strip_prefix(AT_PREFIX) {
                    return ms.parse().ok().map(Self::At);
                }
                (!v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
                    .then(|| Self::After(v.to_string()))
            }
        }
    }

    /// The shard needs no more reading.
    pub fn is_drained(&self) -> bool {
        matches!(self, Self::End | Self::Skipped)
    }
}

impl fmt::Display for Checkpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::After(seq) => f.write_str(seq),
            Self::At(ms) => write!(f, "{AT_PREFIX}{ms}"),
            Self::End => f.write_str(END),
            Self::Skipped => f.write_str(SKIPPED),
        }
    }
}

/// Where a shard's reader asks for its first iterator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Start {
    AfterSequence(String),
    /// Milliseconds since the epoch.
    AtTimestamp(i64),
    TrimHorizon,
    Latest,
}

/// What to do with one shard now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Read(Start),
    /// A parent is not drained yet.
    WaitForParents,
    /// Drained earlier.
    Done,
    /// Closed and the trigger starts at LATEST: mark it [`Checkpoint::Skipped`].
    Skip,
    /// Closed and done up to its ending sequence number: mark it [`Checkpoint::End`] (and stop
    /// its reader). Kinesis also says so by a missing NextShardIterator; emulators do not
    /// always.
    MarkEnd,
}

/// The trigger-wide start settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StartSettings {
    pub position: StartingPosition,
    pub timestamp_ms: Option<i64>,
}

/// Decides every shard the trigger reads. `only`: a single shard named by the trigger
/// (Kubeless's `shard`); then its parents are not waited for. A parent missing from the listing
/// has expired (beyond retention) and counts as drained.
pub fn decide(
    listing: &[ShardInfo],
    checkpoints: &BTreeMap<String, Checkpoint>,
    start: StartSettings,
    only: Option<&str>,
) -> Vec<(String, Decision)> {
    let listed: BTreeSet<&str> = listing.iter().map(|s| s.id.as_str()).collect();
    listing
        .iter()
        .filter(|s| only.is_none_or(|o| o == s.id))
        .map(|s| {
            (
                s.id.clone(),
                decide_one(s, &listed, checkpoints, start, only.is_some()),
            )
        })
        .collect()
}

fn decide_one(
    s: &ShardInfo,
    listed: &BTreeSet<&str>,
    checkpoints: &BTreeMap<String, Checkpoint>,
    start: StartSettings,
    single: bool,
) -> Decision {
    match checkpoints.get(&s.id) {
        Some(c) if c.is_drained() => return Decision::Done,
        Some(Checkpoint::After(seq)) if s.ending.as_deref().is_some_and(|e| !seq_less(seq, e)) => {
            return Decision::MarkEnd;
        }
        Some(Checkpoint::After(seq)) => return Decision::Read(Start::AfterSequence(seq.clone())),
        Some(Checkpoint::At(ms)) => return Decision::Read(Start::AtTimestamp(*ms)),
        _ => {}
    }
    let parents: Vec<&str> = [s.parent.as_deref(), s.adjacent_parent.as_deref()]
        .into_iter()
        .flatten()
        .filter(|p| !p.is_empty())
        .collect();
    if !single {
        let drained = |p: &&str| {
            !listed.contains(*p) || checkpoints.get(*p).is_some_and(Checkpoint::is_drained)
        };
        if !parents.iter().all(drained) {
            return Decision::WaitForParents;
        }
        // We read a parent to its end: the child continues that key range from its first
        // record, whatever the trigger's starting position says.
        if parents
            .iter()
            .any(|p| checkpoints.get(*p) == Some(&Checkpoint::End))
        {
            return Decision::Read(Start::TrimHorizon);
        }
    }
    match start.position {
        StartingPosition::TrimHorizon => Decision::Read(Start::TrimHorizon),
        StartingPosition::AtTimestamp => match start.timestamp_ms {
            Some(ms) => Decision::Read(Start::AtTimestamp(ms)),
            None => Decision::Read(Start::TrimHorizon),
        },
        StartingPosition::Latest if s.closed => Decision::Skip,
        StartingPosition::Latest => Decision::Read(Start::Latest),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shard(id: &str, parent: Option<&str>, adjacent: Option<&str>, closed: bool) -> ShardInfo {
        ShardInfo {
            id: id.into(),
            parent: parent.map(Into::into),
            adjacent_parent: adjacent.map(Into::into),
            closed,
            ending: closed.then(|| "100".to_string()),
        }
    }

    const LATEST: StartSettings = StartSettings {
        position: StartingPosition::Latest,
        timestamp_ms: None,
    };
    const TRIM: StartSettings = StartSettings {
        position: StartingPosition::TrimHorizon,
        timestamp_ms: None,
    };

    fn cps(pairs: &[(&str, Checkpoint)]) -> BTreeMap<String, Checkpoint> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect()
    }

    fn get(d: &[(String, Decision)], id: &str) -> Decision {
        d.iter().find(|(k, _)| k == id).unwrap().1.clone()
    }

    #[test]
    fn checkpoint_values_round_trip() {
        for c in [
            Checkpoint::After("49590338271490256608559692538361571095921575989136588898".into()),
            Checkpoint::At(1_700_000_000_123),
            Checkpoint::End,
            Checkpoint::Skipped,
        ] {
            assert_eq!(Checkpoint::parse(&c.to_string()), Some(c));
        }
        assert_eq!(Checkpoint::parse("garbage"), None);
        assert_eq!(Checkpoint::parse(""), None);
        assert_eq!(Checkpoint::parse("at:x"), None);
    }

    #[test]
    fn checkpoints_win_over_the_starting_position() {
        let listing = [shard("a", None, None, false), shard("b", None, None, false)];
        let d = decide(
            &listing,
            &cps(&[
                ("a", Checkpoint::After("17".into())),
                ("b", Checkpoint::At(5)),
            ]),
            LATEST,
            None,
        );
        assert_eq!(
            get(&d, "a"),
            Decision::Read(Start::AfterSequence("17".into()))
        );
        assert_eq!(get(&d, "b"), Decision::Read(Start::AtTimestamp(5)));
        let d = decide(&listing, &BTreeMap::new(), TRIM, None);
        assert_eq!(get(&d, "a"), Decision::Read(Start::TrimHorizon));
        let at = StartSettings {
            position: StartingPosition::AtTimestamp,
            timestamp_ms: Some(42),
        };
        let d = decide(&listing, &BTreeMap::new(), at, None);
        assert_eq!(get(&d, "b"), Decision::Read(Start::AtTimestamp(42)));
    }

    #[test]
    fn split_children_wait_for_the_parent_then_start_at_their_beginning() {
        let listing = [
            shard("p", None, None, true),
            shard("c1", Some("p"), None, false),
            shard("c2", Some("p"), None, false),
        ];
        let d = decide(
            &listing,
            &cps(&[("p", Checkpoint::After("9".into()))]),
            LATEST,
            None,
        );
        assert_eq!(
            get(&d, "p"),
            Decision::Read(Start::AfterSequence("9".into()))
        );
        assert_eq!(get(&d, "c1"), Decision::WaitForParents);
        assert_eq!(get(&d, "c2"), Decision::WaitForParents);
        let d = decide(&listing, &cps(&[("p", Checkpoint::End)]), LATEST, None);
        assert_eq!(get(&d, "p"), Decision::Done);
        assert_eq!(get(&d, "c1"), Decision::Read(Start::TrimHorizon));
        assert_eq!(get(&d, "c2"), Decision::Read(Start::TrimHorizon));
    }

    #[test]
    fn a_closed_shard_done_up_to_its_ending_sequence_is_drained() {
        let listing = [
            shard("p", None, None, true),
            shard("c", Some("p"), None, false),
        ];
        let d = decide(
            &listing,
            &cps(&[("p", Checkpoint::After("99".into()))]),
            TRIM,
            None,
        );
        assert_eq!(
            get(&d, "p"),
            Decision::Read(Start::AfterSequence("99".into()))
        );
        let d = decide(
            &listing,
            &cps(&[("p", Checkpoint::After("100".into()))]),
            TRIM,
            None,
        );
        assert_eq!(get(&d, "p"), Decision::MarkEnd);
        assert_eq!(get(&d, "c"), Decision::WaitForParents);
        assert!(seq_less("99", "100") && !seq_less("100", "100") && seq_less("100", "101"));
    }

    #[test]
    fn merge_child_waits_for_both_parents() {
        let listing = [
            shard("a", None, None, true),
            shard("b", None, None, true),
            shard("m", Some("a"), Some("b"), false),
        ];
        let d = decide(&listing, &cps(&[("a", Checkpoint::End)]), TRIM, None);
        assert_eq!(get(&d, "m"), Decision::WaitForParents);
        assert_eq!(get(&d, "b"), Decision::Read(Start::TrimHorizon));
        let d = decide(
            &listing,
            &cps(&[("a", Checkpoint::End), ("b", Checkpoint::End)]),
            TRIM,
            None,
        );
        assert_eq!(get(&d, "m"), Decision::Read(Start::TrimHorizon));
    }

    #[test]
    fn latest_skips_closed_shards_and_their_children_start_latest() {
        let listing = [
            shard("p", None, None, true),
            shard("c", Some("p"), None, false),
        ];
        let d = decide(&listing, &BTreeMap::new(), LATEST, None);
        assert_eq!(get(&d, "p"), Decision::Skip);
        assert_eq!(get(&d, "c"), Decision::WaitForParents);
        let d = decide(&listing, &cps(&[("p", Checkpoint::Skipped)]), LATEST, None);
        assert_eq!(get(&d, "c"), Decision::Read(Start::Latest));
    }

    #[test]
    fn expired_parents_count_as_drained_and_a_single_shard_ignores_parents() {
        let listing = [shard("c", Some("gone"), None, false)];
        let d = decide(&listing, &BTreeMap::new(), TRIM, None);
        assert_eq!(get(&d, "c"), Decision::Read(Start::TrimHorizon));

        let listing = [
            shard("p", None, None, false),
            shard("c", Some("p"), None, false),
        ];
        let d = decide(&listing, &BTreeMap::new(), LATEST, Some("c"));
        assert_eq!(d, vec![("c".to_string(), Decision::Read(Start::Latest))]);
        assert!(decide(&listing, &BTreeMap::new(), LATEST, Some("x")).is_empty());
    }
}
