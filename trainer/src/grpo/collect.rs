//! A step's rollouts, collected: the step's tasks drawn, their groups rolled
//! out (this rank's share, then every rank's gathered), and under
//! `zero_std_groups = "resample"` further rounds ([`super::resample`]).
//!
//! [`Collector`] holds what collecting needs and nothing of the trainer's
//! weights or optimizer, so it can run on a thread of its own while the
//! trainer updates (`[rollout] off_policy = 1`, [`super::Trainer::step`]).
//! What it returns, [`Rollouts`], serializes: a checkpoint keeps the next
//! step's rollouts when they were made ahead (their policy is gone once the
//! update has run), so a resumed run trains on the same episodes.

use super::config::TrainerConfig;
use super::{engine_sync, resample};
use crate::dist::{self, Dist};
use crate::error::Result;
use crate::grpo::advantages::ZeroStdGroups;
use crate::model_policy::ModelPolicy;
use lm::model::CausalLm;
use rand_chacha::ChaCha8Rng;
use rollout::episode::driver::{run_episodes, Env};
use rollout::episode::Episode;
use rollout::tasks::Task;
use serde::{Deserialize, Serialize};
use std::time::Instant;

/// Draws `k` further tasks (the run's task sampler).
pub type Draw<'a> = dyn FnMut(usize) -> Vec<Task> + Send + 'a;

/// One step's rollouts: every rank's episodes of every round.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rollouts {
    /// Steps the trainer had done when it generated them: the version of
    /// the policy that sampled (the behaviour policy).
    pub policy_step: u64,
    pub episodes: Vec<Episode>,
    /// The refill's counts under `zero_std_groups = "resample"`.
    pub refill: Option<resample::Refill>,
    /// Episodes this rank rolled out, and their tasks in the order drawn.
    pub rolled_out: usize,
    pub rolled_tasks: Vec<String>,
    /// What the weight sync before them took and found (vLLM engine).
    #[serde(skip)]
    pub synced: Option<engine_sync::Synced>,
    /// Wall seconds the collection took (the slowest rank's), with the
    /// weight sync before it.
    #[serde(skip)]
    pub seconds: f64,
}

/// What generates the turns: this process's decoding, with the sampling
/// stream it draws from, or the vLLM server.
pub enum Source<'m> {
    Model { model: &'m CausalLm, rng: ChaCha8Rng },
    Engine(engine_sync::EngineSync),
}

/// Collects a step's rollouts from a [`Source`]; shares nothing with the
/// update.
pub struct Collector<'a> {
    pub cfg: &'a TrainerConfig,
    pub dist: &'a Dist,
    pub source: Source<'a>,
    /// Steps done when the generating policy was set: [`Rollouts::policy_step`].
    pub policy_step: u64,
    /// Steps done when the step that trains on them starts (the engine's
    /// requests are seeded from it and the round, on- or off-policy alike).
    pub seed_step: u64,
    /// The weight sync done before this collection, reported with it.
    pub synced: Option<engine_sync::Synced>,
}

impl Collector<'_> {
    /// Draws the step's `tasks_per_step` tasks and rolls them out, then
    /// refills under `zero_std_groups = "resample"`.
    pub fn collect(&mut self, env: &Env<'_>, draw: &mut Draw<'_>) -> Result<Rollouts> {
        let t0 = Instant::now();
        let tasks = draw(self.cfg.train.tasks_per_step);
        let mut rolled = Rolled::default();
        let mut episodes = self.round(env, &tasks, &mut rolled)?;
        let refill = match self.cfg.update.zero_std_groups {
            ZeroStdGroups::Resample => Some(self.refill(env, &mut episodes, tasks.len(), draw, &mut rolled)?),
            ZeroStdGroups::Keep | ZeroStdGroups::Drop => None,
        };
        let mut seconds = [t0.elapsed().as_secs_f64()];
        dist::reduce::max_f64(&**self.dist, &mut seconds)?;
        Ok(Rollouts {
            policy_step: self.policy_step,
            episodes,
            refill,
            rolled_out: rolled.episodes,
            rolled_tasks: rolled.tasks,
            synced: self.synced,
            seconds: seconds[0] + self.synced.map_or(0.0, |s| s.seconds),
        })
    }

    /// One round: this rank's share of `tasks`, then every rank's episodes,
    /// gathered in rank order.
    fn round(&mut self, env: &Env<'_>, tasks: &[Task], rolled: &mut Rolled) -> Result<Vec<Episode>> {
        let mine = &tasks[dist::share(&**self.dist, tasks.len())];
        let local = self.rollouts(env, mine, rolled.rounds)?;
        rolled.rounds += 1;
        rolled.episodes += local.len();
        rolled.tasks.extend(mine.iter().map(|t| t.instance_id.clone()));
        dist::gather_concat(&**self.dist, local)
    }

    /// `zero_std_groups = "resample"`: further rounds on tasks `draw` draws
    /// until `target` groups of `episodes` have a reward spread or `[grpo]
    /// max_resample_draws` further tasks were drawn. Every rank decides on
    /// the gathered episodes, so all draw the same tasks.
    fn refill(&mut self, env: &Env<'_>, episodes: &mut Vec<Episode>, target: usize, draw: &mut Draw<'_>, rolled: &mut Rolled) -> Result<resample::Refill> {
        let (group, max_more) = (self.cfg.group, self.cfg.update.resample_draws(target));
        let reward = self.cfg.reward.clone();
        resample::refill(episodes, group, target, max_more, |e| e.training_reward(&reward), |k| {
            let tasks = draw(k);
            self.round(env, &tasks, rolled)
        })
    }

    /// G episodes per task. From the model, the sampling stream is lent to
    /// the policy and taken back (so it can be checkpointed); from the
    /// engine, each round's requests are seeded from the step and the round,
    /// and the server's weights are checked again afterwards.
    fn rollouts(&mut self, env: &Env<'_>, tasks: &[Task], round: usize) -> Result<Vec<Episode>> {
        let (group, episode) = (self.cfg.group, &self.cfg.episode);
        let result = match &mut self.source {
            Source::Model { model, rng } => {
                let stop = env.tokenizer.stop_ids().to_vec();
                let lent = std::mem::replace(rng, rand::SeedableRng::seed_from_u64(0));
                let mut policy = ModelPolicy::new(model, self.cfg.sampler, lent, stop, self.cfg.limits);
                let result = run_episodes(&mut policy, env, tasks, group, episode, |_| {});
                *rng = policy.into_rng();
                result
            }
            Source::Engine(sync) => {
                sync.seed_round(self.seed_step, round);
                let result = run_episodes(&mut sync.engine, env, tasks, group, episode, |_| {});
                if result.is_ok() {
                    sync.check()?;
                }
                result
            }
        };
        Ok(result?)
    }
}

/// What this rank rolled out in a step's rounds of rollouts.
#[derive(Default)]
struct Rolled {
    rounds: usize,
    episodes: usize,
    tasks: Vec<String>,
}
