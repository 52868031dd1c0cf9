#[derive(clap::Subcommand)]
pub enum Command {
    /// Render a conversation with the model's chat template (placeholder).
    Render,
}

pub fn run(_cmd: Command) -> anyhow::Result<()> {
    anyhow::bail!("not built yet")
}
