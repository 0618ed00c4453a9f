//! Balanced slots per queue: how many of the worker's job slots each
//! queue of `--queue` gets (`[worker] balance`, Horizon's `balance`).
//!
//! A pure decision, no I/O and no clock: [`Balancer::decide`] takes each
//! queue's [`Load`] (jobs waiting, slots busy, mean runtime) and gives the
//! new number of slots per queue. The loop side (a slot of a queue pops
//! only that queue; a round every `balance_cooldown`) is in
//! [`queue_slots`](super::queue_slots) and [`rounds`](super::rounds).
//!
//! - `simple`: the slots are split evenly once, and stay so.
//! - `auto`: each round, every queue's share of `max_processes` follows
//!   its work — jobs waiting (ready and delayed already due) plus slots
//!   busy, weighed by the mean runtime (`time`: Horizon's time to clear)
//!   or not (`size`: Horizon's job count).
//!
//! Where Horizon's users get hurt, this differs:
//! - a queue gets no more slots than it has jobs to run, so the worker
//!   starts at `min_processes` per queue and grows with the backlog, and
//!   an idle worker goes back to the minimum;
//! - no oscillation: a queue grows only to whole slots it wants and
//!   shrinks only by whole slots it does not (a dead band of one slot),
//!   and gives a slot up only when it had no use for it over the last
//!   [`Policy::shrink_rounds`] rounds;
//! - `min_processes` always holds per queue (the sum of the minimums
//!   must fit in `max_processes`, checked at start);
//! - a runtime never read counts as the other queues' mean, never as 0,
//!   so a queue that has not finished a job yet is not weighed as free.
//!
//! Scale-down never stops a job: a slot taken away only stops its queue
//! from reserving more (see [`queue_slots`](super::queue_slots)).

use std::collections::VecDeque;
use std::time::Duration;

/// `[worker] balance` (Horizon's `balance` option).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// No slots per queue: every slot polls the queues in `--queue`'s
    /// priority order, as `queue:work` (the default).
    Off,
    /// The slots split evenly between the queues, once.
    Simple,
    /// The slots follow each queue's work, between the minimum and maximum.
    Auto,
}

impl std::str::FromStr for Mode {
    type Err = anyhow::Error;

    fn from_str(text: &str) -> anyhow::Result<Self> {
        match text {
            "off" | "false" => Ok(Mode::Off),
            "simple" => Ok(Mode::Simple),
            "auto" => Ok(Mode::Auto),
            other => anyhow::bail!("{other:?}: expected \"off\", \"simple\" or \"auto\""),
        }
    }
}

/// `[worker] auto_scaling_strategy` (Horizon's `autoScalingStrategy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// Shares by time to clear: jobs × mean runtime (the default).
    Time,
    /// Shares by number of jobs.
    Size,
}

impl std::str::FromStr for Strategy {
    type Err = anyhow::Error;

    fn from_str(text: &str) -> anyhow::Result<Self> {
        match text {
            "time" => Ok(Strategy::Time),
            "size" => Ok(Strategy::Size),
            other => anyhow::bail!("{other:?}: expected \"time\" or \"size\""),
        }
    }
}

/// One queue's limits, in slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Slots the queue always keeps (`min_processes`).
    pub min: usize,
    /// Slots the queue never exceeds (`max_processes` of the queue, else
    /// the group's).
    pub max: usize,
}

/// How the slots are balanced, resolved for the queues of `--queue`.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    /// `simple` or `auto` (`off` has no policy).
    pub mode: Mode,
    /// What an `auto` share follows.
    pub strategy: Strategy,
    /// Slots in all (`max_processes` of the group): jobs in flight at once.
    pub total: usize,
    /// Per queue, in `--queue` order.
    pub bounds: Vec<Bounds>,
    /// Most slots a queue gains or loses in one round (`balance_max_shift`).
    pub max_shift: usize,
    /// Time between two rounds (`balance_cooldown`).
    pub cooldown: Duration,
    /// Rounds in a row a queue must have no use for a slot before it
    /// gives it up (the hysteresis of scale-down; at least 1).
    pub shrink_rounds: usize,
}

/// Rounds a surplus must last before a queue gives a slot up.
pub const SHRINK_ROUNDS: usize = 2;

/// The most a queue's remaining slots may be busy, on average, for it to
/// give one up: 0.8 keeps a fifth of each slot as headroom, so a queue
/// busy 0.95 slots keeps its second slot instead of queueing on one.
pub const SHRINK_UTILISATION: f64 = 0.8;

/// One queue's work at the time of a round.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Load {
    /// Jobs waiting: ready, plus delayed already due.
    pub pending: u64,
    /// Slots busy with a job of the queue, on average since the last
    /// round (0.5: one slot busy half the time).
    pub busy: f64,
    /// Mean seconds a job of the queue holds its slot; `None` before the
    /// first one ends.
    pub runtime: Option<f64>,
}

/// The slots per queue and the memory the hysteresis needs.
#[derive(Debug, Clone)]
pub struct Balancer {
    policy: Policy,
    slots: Vec<usize>,
    /// Per queue, its targets of the last `shrink_rounds` rounds.
    recent: Vec<VecDeque<usize>>,
}

impl Balancer {
    /// The starting allocation: `simple` splits the slots evenly, `auto`
    /// starts every queue at its minimum.
    pub fn new(policy: Policy) -> Self {
        let slots = match policy.mode {
            Mode::Simple => even_split(policy.total, &policy.bounds),
            _ => policy.bounds.iter().map(|b| b.min).collect(),
        };
        let recent = vec![VecDeque::new(); slots.len()];
        Balancer {
            policy,
            slots,
            recent,
        }
    }

    /// Slots per queue now, in `--queue` order.
    pub fn slots(&self) -> &[usize] {
        &self.slots
    }

    /// The policy it follows.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// One round: moves slots towards the queues' wants (`loads` in
    /// `--queue` order), at most `max_shift` per queue, never below a
    /// minimum nor above a maximum or the total. `simple` never moves.
    pub fn decide(&mut self, loads: &[Load]) -> &[usize] {
        if self.policy.mode != Mode::Auto || loads.len() != self.slots.len() {
            return &self.slots;
        }
        let wants = wants(&self.policy, loads);
        let targets = targets(&wants, &self.slots, &self.policy.bounds);
        let keep = self.policy.shrink_rounds.max(1);
        for (recent, &target) in self.recent.iter_mut().zip(&targets) {
            recent.push_back(target);
            while recent.len() > keep {
                recent.pop_front();
            }
        }
        self.shrink(&targets, keep);
        self.grow(&targets);
        &self.slots
    }

    /// Takes slots from the queues whose targets stayed below their slots
    /// for `keep` rounds, down to the highest of those targets.
    fn shrink(&mut self, targets: &[usize], keep: usize) {
        for (q, slots) in self.slots.iter_mut().enumerate() {
            let recent = &self.recent[q];
            if targets[q] >= *slots || recent.len() < keep {
                continue;
            }
            let highest = recent.iter().copied().max().unwrap_or(*slots);
            if highest < *slots {
                let floor = slots.saturating_sub(self.policy.max_shift.max(1));
                *slots = highest.max(floor).max(self.policy.bounds[q].min);
            }
        }
    }

    /// Gives free slots, one at a time, to the queue furthest below its
    /// target (ties: the first in `--queue` order), each at most
    /// `max_shift` this round.
    fn grow(&mut self, targets: &[usize]) {
        let start = self.slots.clone();
        let shift = self.policy.max_shift.max(1);
        let mut free = self
            .policy
            .total
            .saturating_sub(self.slots.iter().sum::<usize>());
        while free > 0 {
            let next = (0..self.slots.len())
                .filter(|&q| self.slots[q] < targets[q] && self.slots[q] < start[q] + shift)
                .max_by_key(|&q| (targets[q] - self.slots[q], std::cmp::Reverse(q)));
            let Some(q) = next else { break };
            self.slots[q] += 1;
            free -= 1;
        }
    }
}

/// `total` split evenly between queues within their bounds: every queue
/// starts at its minimum, then each slot left goes to the queue with the
/// fewest below its maximum (ties: the first in `--queue` order).
pub fn even_split(total: usize, bounds: &[Bounds]) -> Vec<usize> {
    let mut slots: Vec<usize> = bounds.iter().map(|b| b.min).collect();
    let mut free = total.saturating_sub(slots.iter().sum());
    while free > 0 {
        let fewest = (0..slots.len())
            .filter(|&q| slots[q] < bounds[q].max)
            .min_by_key(|&q| slots[q]);
        let Some(q) = fewest else { break };
        slots[q] += 1;
        free -= 1;
    }
    slots
}

/// Each queue's ideal slots (a real number): the total shared by weight
/// (jobs waiting and running, times the mean runtime for `time`), no
/// queue given more than its jobs can use nor more than its maximum, what
/// one cannot use shared again among the others; at least one slot for a
/// queue with a job waiting. Minimums are applied later (see [`targets`]).
pub fn wants(policy: &Policy, loads: &[Load]) -> Vec<f64> {
    let known: Vec<f64> = loads.iter().filter_map(|l| l.runtime).collect();
    let fallback = if known.is_empty() {
        1.0
    } else {
        known.iter().sum::<f64>() / known.len() as f64
    };
    let needs: Vec<f64> = loads
        .iter()
        .zip(&policy.bounds)
        .map(|(l, b)| (l.pending as f64 + l.busy).min(b.max as f64))
        .collect();
    let weights: Vec<f64> = loads
        .iter()
        .map(|l| {
            let jobs = l.pending as f64 + l.busy;
            match policy.strategy {
                Strategy::Size => jobs,
                Strategy::Time => jobs * l.runtime.unwrap_or(fallback).max(1e-6),
            }
        })
        .collect();
    let mut wants = share(policy.total as f64, &weights, &needs);
    for (want, load) in wants.iter_mut().zip(loads) {
        if load.pending > 0 {
            *want = want.max(1.0);
        }
    }
    wants
}

/// `total` shared in proportion to `weights`, none above its cap; what a
/// capped one leaves goes to the others (water filling).
fn share(total: f64, weights: &[f64], caps: &[f64]) -> Vec<f64> {
    let mut out = vec![0.0; weights.len()];
    let mut open: Vec<usize> = (0..weights.len()).filter(|&q| weights[q] > 0.0).collect();
    let mut left = total;
    while !open.is_empty() && left > 1e-9 {
        let sum: f64 = open.iter().map(|&q| weights[q]).sum();
        let capped: Vec<usize> = open
            .iter()
            .copied()
            .filter(|&q| left * weights[q] / sum >= caps[q])
            .collect();
        if capped.is_empty() {
            for &q in &open {
                out[q] = left * weights[q] / sum;
            }
            break;
        }
        for &q in &capped {
            out[q] = caps[q];
            left -= caps[q];
        }
        open.retain(|q| !capped.contains(q));
    }
    out
}

/// Whole-slot targets with a dead band: a queue grows only to the whole
/// slots it wants (`floor`), shrinks only to the slots that its want keeps
/// at most [`SHRINK_UTILISATION`] busy, else keeps what it has; always
/// within its bounds.
pub fn targets(wants: &[f64], slots: &[usize], bounds: &[Bounds]) -> Vec<usize> {
    wants
        .iter()
        .zip(slots)
        .zip(bounds)
        .map(|((&want, &now), b)| {
            let keep = (want / SHRINK_UTILISATION).ceil() as usize;
            let target = if want >= now as f64 + 1.0 {
                want.floor() as usize
            } else if keep < now {
                keep
            } else {
                now
            };
            target.clamp(b.min, b.max.max(b.min))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(total: usize, mins: &[usize], shift: usize) -> Policy {
        Policy {
            mode: Mode::Auto,
            strategy: Strategy::Time,
            total,
            bounds: mins.iter().map(|&min| Bounds { min, max: total }).collect(),
            max_shift: shift,
            cooldown: Duration::from_secs(3),
            shrink_rounds: SHRINK_ROUNDS,
        }
    }

    fn idle() -> Load {
        Load::default()
    }

    fn waiting(pending: u64, runtime: f64) -> Load {
        Load {
            pending,
            busy: 0.0,
            runtime: Some(runtime),
        }
    }

    #[test]
    fn modes_and_strategies_parse_horizons_words() {
        assert_eq!("off".parse::<Mode>().unwrap(), Mode::Off);
        assert_eq!("false".parse::<Mode>().unwrap(), Mode::Off);
        assert_eq!("simple".parse::<Mode>().unwrap(), Mode::Simple);
        assert_eq!("auto".parse::<Mode>().unwrap(), Mode::Auto);
        assert!(
            "on".parse::<Mode>()
                .unwrap_err()
                .to_string()
                .contains("\"auto\"")
        );
        assert_eq!("time".parse::<Strategy>().unwrap(), Strategy::Time);
        assert_eq!("size".parse::<Strategy>().unwrap(), Strategy::Size);
        assert!("jobs".parse::<Strategy>().is_err());
    }

    #[test]
    fn an_even_split_gives_the_remainder_to_the_first_queues_within_bounds() {
        let b = |min, max| Bounds { min, max };
        assert_eq!(even_split(7, &[b(1, 9), b(1, 9), b(1, 9)]), [3, 2, 2]);
        assert_eq!(even_split(7, &[b(0, 1), b(2, 9), b(0, 9)]), [1, 3, 3]);
        assert_eq!(even_split(3, &[b(0, 1), b(0, 1)]), [1, 1], "maxima hold");
    }

    #[test]
    fn simple_splits_once_and_never_moves() {
        let mut p = policy(6, &[1, 1, 1], 1);
        p.mode = Mode::Simple;
        let mut b = Balancer::new(p);
        assert_eq!(b.slots(), [2, 2, 2]);
        assert_eq!(b.decide(&[waiting(500, 1.0), idle(), idle()]), [2, 2, 2]);
    }

    #[test]
    fn auto_starts_at_the_minimum_and_an_idle_worker_stays_there() {
        let mut b = Balancer::new(policy(10, &[1, 2, 0], 1));
        assert_eq!(
            b.slots(),
            [1, 2, 0],
            "starts at the minimum, not the maximum"
        );
        for _ in 0..50 {
            assert_eq!(b.decide(&[idle(), idle(), idle()]), [1, 2, 0]);
        }
    }

    #[test]
    fn one_waiting_job_gets_one_slot_not_the_maximum() {
        let mut b = Balancer::new(policy(10, &[0, 0], 5));
        assert_eq!(b.decide(&[waiting(1, 2.0), idle()]), [1, 0]);
        assert_eq!(b.decide(&[waiting(1, 2.0), idle()]), [1, 0]);
    }

    #[test]
    fn a_burst_grows_by_the_shift_each_round_then_shrinks_after_the_hysteresis() {
        let mut b = Balancer::new(policy(6, &[1, 1], 1));
        let burst = [waiting(100, 1.0), idle()];
        let mut seen = vec![b.slots().to_vec()];
        for _ in 0..6 {
            seen.push(b.decide(&burst).to_vec());
        }
        assert_eq!(
            seen,
            [[1, 1], [2, 1], [3, 1], [4, 1], [5, 1], [5, 1], [5, 1]]
        );
        // The burst is over: the first round of surplus changes nothing,
        // then one slot per round goes back.
        let over = [idle(), idle()];
        let mut after = vec![];
        for _ in 0..6 {
            after.push(b.decide(&over).to_vec());
        }
        assert_eq!(after, [[5, 1], [4, 1], [3, 1], [2, 1], [1, 1], [1, 1]]);
    }

    #[test]
    fn the_shift_bounds_each_round_and_the_minimum_holds_beside_a_hot_queue() {
        let mut b = Balancer::new(policy(8, &[1, 2, 1], 3));
        let hot = [idle(), waiting(1_000, 0.5), idle()];
        assert_eq!(b.decide(&hot), [1, 5, 1]);
        assert_eq!(
            b.decide(&hot),
            [1, 6, 1],
            "8 slots, the others keep their minimum"
        );
        assert_eq!(b.decide(&hot), [1, 6, 1]);
    }

    #[test]
    fn a_moving_burst_takes_the_slots_the_other_queue_gives_up() {
        let mut b = Balancer::new(policy(4, &[1, 1], 2));
        let on_a = [waiting(50, 1.0), idle()];
        b.decide(&on_a);
        assert_eq!(b.decide(&on_a), [3, 1]);
        let on_b = [idle(), waiting(50, 1.0)];
        assert_eq!(b.decide(&on_b), [3, 1], "a keeps its slots one round");
        assert_eq!(b.decide(&on_b), [1, 3], "then hands them over");
    }

    #[test]
    fn time_weighs_by_runtime_and_size_by_count() {
        // 40 jobs of 0.1 s against 10 jobs of 2 s.
        let loads = [waiting(40, 0.1), waiting(10, 2.0)];
        let mut p = policy(10, &[1, 1], 10);
        let time = wants(&p, &loads);
        assert!(time[1] > 8.0 && time[0] < 2.0, "{time:?}");
        p.strategy = Strategy::Size;
        let size = wants(&p, &loads);
        assert!(
            (size[0] - 8.0).abs() < 1e-9 && (size[1] - 2.0).abs() < 1e-9,
            "{size:?}"
        );
    }

    #[test]
    fn a_runtime_never_read_counts_as_the_others_mean_not_zero() {
        let p = policy(10, &[0, 0], 10);
        let unknown = Load {
            pending: 10,
            busy: 0.0,
            runtime: None,
        };
        let w = wants(&p, &[waiting(10, 1.0), unknown]);
        assert!(
            (w[0] - 5.0).abs() < 1e-9 && (w[1] - 5.0).abs() < 1e-9,
            "{w:?}"
        );
    }

    #[test]
    fn what_a_queue_cannot_use_goes_to_the_others() {
        // Time would give the 2 slow jobs nearly all 10 slots; they can use 2.
        let p = policy(10, &[0, 0], 10);
        let w = wants(&p, &[waiting(100, 0.01), waiting(2, 10.0)]);
        assert!(
            (w[1] - 2.0).abs() < 1e-9 && (w[0] - 8.0).abs() < 1e-9,
            "{w:?}"
        );
    }

    #[test]
    fn a_steady_load_settles_and_noise_moves_nothing() {
        let mut b = Balancer::new(policy(8, &[1, 1], 1));
        // Work for 2.6 slots on the first queue (a backlog while it has
        // fewer), half a slot on the second; `jitter` moves the averages.
        let steady = |slots: &[usize], jitter: f64| {
            [
                Load {
                    pending: if slots[0] < 3 { 5 } else { 0 },
                    busy: (2.6 + jitter).min(slots[0] as f64),
                    runtime: Some(0.2),
                },
                Load {
                    pending: 0,
                    busy: 0.5 - jitter / 2.0,
                    runtime: Some(1.0),
                },
            ]
        };
        for _ in 0..5 {
            let loads = steady(b.slots(), 0.0);
            b.decide(&loads);
        }
        assert_eq!(b.slots(), [3, 1]);
        let mut changes = 0;
        for round in 0..200 {
            let jitter = [0.3, -0.3, 0.1, -0.2][round % 4];
            let before = b.slots().to_vec();
            let loads = steady(&before, jitter);
            if b.decide(&loads) != before.as_slice() {
                changes += 1;
            }
        }
        assert_eq!(changes, 0, "ended at {:?}", b.slots());
    }

    #[test]
    fn every_round_keeps_the_bounds_the_total_and_the_shift() {
        let mut p = policy(12, &[1, 0, 2, 1], 2);
        p.bounds[3].max = 3;
        let mut b = Balancer::new(p.clone());
        let mut seed: u64 = 7;
        let mut next = move |n: u64| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) % n
        };
        for _ in 0..2_000 {
            let before = b.slots().to_vec();
            let loads: Vec<Load> = (0..4)
                .map(|q| Load {
                    pending: next(40) * next(2),
                    busy: before[q] as f64 * next(11) as f64 / 10.0,
                    runtime: (next(4) > 0).then(|| 0.01 * (1 + next(300)) as f64),
                })
                .collect();
            let after = b.decide(&loads).to_vec();
            assert!(after.iter().sum::<usize>() <= p.total, "{after:?}");
            for q in 0..4 {
                assert!(
                    (p.bounds[q].min..=p.bounds[q].max).contains(&after[q]),
                    "{after:?}"
                );
                assert!(
                    after[q].abs_diff(before[q]) <= p.max_shift,
                    "{before:?} → {after:?}"
                );
            }
        }
    }
}
