//! The one check of a config against the number of data-parallel ranks
//! (`mpirun -n N`): what `train`, `sft` and `pipeline` call before any
//! work, so that a setting a world size cannot run is refused up front,
//! naming its key, and not after the first stages ran.

use super::{Engine, RunConfig};
use crate::error::{Error, Result};

/// What runs on the ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Job {
    /// A GRPO run (`train`).
    Grpo,
    /// Supervised fine-tuning (`sft`).
    Sft,
    /// The whole recipe (`pipeline`): SFT, then GRPO (its pilot runs and its stage).
    Pipeline,
}

impl RunConfig {
    /// Whether `job` can run on `world` ranks with this config:
    /// `Err((key, message))` naming the first setting that cannot. A GRPO
    /// step's tasks are shared evenly among the ranks (`[train]
    /// tasks_per_step` a multiple of `world`); off-policy rollouts and a
    /// vLLM server run as one process so far.
    pub fn ranks_problem(&self, job: Job, world: usize) -> std::result::Result<(), (&'static str, String)> {
        if world <= 1 {
            return Ok(());
        }
        let grpo = matches!(job, Job::Grpo | Job::Pipeline);
        if job == Job::Pipeline && self.rollout.engine == Engine::Vllm {
            return Err((
                "rollout.engine",
                format!("[rollout] engine = \"vllm\" with {world} ranks: a pipeline on a vLLM server runs as one process (the server does the batching); run without mpirun/srun"),
            ));
        }
        if grpo && self.rollout.engine == Engine::Vllm {
            return Err((
                "rollout.engine",
                format!("[rollout] engine = \"vllm\" with {world} ranks: GRPO on a vLLM server runs as one process so far (the server does the batching); run without mpirun/srun"),
            ));
        }
        if grpo && self.rollout.off_policy != 0 {
            return Err((
                "rollout.off_policy",
                format!("[rollout] off_policy = {} with {world} ranks: off-policy rollouts run as one process so far; run without mpirun/srun or set off_policy = 0", self.rollout.off_policy),
            ));
        }
        let tasks = self.train.tasks_per_step;
        if grpo && !tasks.is_multiple_of(world) {
            return Err((
                "train.tasks_per_step",
                format!(
                    "[train] tasks_per_step = {tasks} is not a multiple of the {world} ranks: each rank rolls out an equal share of a step's tasks, so some would idle a group's rollout every step; set it to {} or {}",
                    (tasks / world).max(1) * world,
                    (tasks / world + 1) * world
                ),
            ));
        }
        Ok(())
    }

    /// [`RunConfig::ranks_problem`] as an error naming the key.
    pub fn check_ranks(&self, job: Job, world: usize) -> Result<()> {
        self.ranks_problem(job, world).map_err(|(key, message)| Error::Invalid { what: format!("config key `{key}`"), message })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(extra: &str) -> RunConfig {
        toml::from_str(&format!("name = \"t\"\n[model]\npath = \"m\"\n[env]\nrepos_dir = \"r\"\n{extra}")).unwrap()
    }

    /// `tasks_per_step` not a multiple of the ranks is refused for GRPO and
    /// for the pipeline (whose GRPO stage shares the tasks as `train`
    /// does), naming the key; SFT shares rows and takes any world.
    #[test]
    fn tasks_per_step_must_share_evenly_among_the_ranks_of_train_and_pipeline() {
        let three = cfg("[train]\ntasks_per_step = 3\n");
        for job in [Job::Grpo, Job::Pipeline] {
            let (key, message) = three.ranks_problem(job, 2).unwrap_err();
            assert_eq!(key, "train.tasks_per_step");
            assert!(message.contains("tasks_per_step = 3 is not a multiple of the 2 ranks") && message.contains("set it to 2 or 4"), "{message}");
            assert!(three.check_ranks(job, 2).unwrap_err().to_string().starts_with("config key `train.tasks_per_step`: "));
            three.ranks_problem(job, 1).unwrap();
            three.ranks_problem(job, 3).unwrap();
        }
        three.ranks_problem(Job::Sft, 2).unwrap();
    }

    #[test]
    fn off_policy_and_vllm_run_as_one_process() {
        let off = cfg("[rollout]\noff_policy = 1\n[grpo]\nrollout_correction = \"tis\"\n");
        assert_eq!(off.ranks_problem(Job::Grpo, 2).unwrap_err().0, "rollout.off_policy");
        assert_eq!(off.ranks_problem(Job::Pipeline, 2).unwrap_err().0, "rollout.off_policy");
        off.ranks_problem(Job::Grpo, 1).unwrap();
        let vllm = cfg("[rollout]\nengine = \"vllm\"\n[rollout.vllm]\nurl = \"http://h:1\"\nserved_model = \"p\"\n");
        assert!(vllm.ranks_problem(Job::Grpo, 2).unwrap_err().1.contains("GRPO on a vLLM server"));
        assert!(vllm.ranks_problem(Job::Pipeline, 2).unwrap_err().1.contains("a pipeline on a vLLM server"));
        vllm.ranks_problem(Job::Sft, 2).unwrap();
    }
}
