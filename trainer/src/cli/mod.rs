//! One module per subcommand: its clap arguments and its `run`.

pub mod chat;
pub mod generate;
pub mod init_tiny;
pub mod score;
