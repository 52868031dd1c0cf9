//! `[env]`: where tasks' repositories are, and the tools' settings.

use rollout::tools::ToolConfig;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Where tasks' repositories are.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvSection {
    /// Folder of `<owner>__<name>[.git]` repositories.
    pub repos_dir: PathBuf,
    #[serde(default)]
    pub tools: ToolConfig,
}
