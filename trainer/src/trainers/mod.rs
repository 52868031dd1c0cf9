//! The trainers, side by side: [`grpo::Trainer`] (one GRPO step: rollouts,
//! rewards, advantages, the update) and [`sft::Trainer`] (one SFT step).
//! They sit above the algorithms they run ([`crate::grpo`], [`crate::sft`],
//! [`crate::backward`]) and the run config ([`crate::run_config`]), which
//! holds the algorithms' value enums: the dependencies run one way.

pub mod grpo;
pub mod sft;
