//! The localizer as a Model Context Protocol server over stdio (`fusegrpo mcp`) (the official
//! Rust SDK, `rmcp`) that gives coding agents a `localize` tool, and the
//! three sandboxed tools (`grep`, `glob`, `read_file`) for their own
//! follow-up. The model loads once, on a worker thread that serves the
//! localizations one at a time (further calls queue); a call with a
//! progress token gets a progress notification after the search, each
//! batch of the model's turns and each attempt, and a
//! call the client cancels (`notifications/cancelled`) is skipped if still
//! queued, or stopped before the model's next token (a policy that does not
//! generate tokens here: at its next turn). Every bad input is a tool
//! error (`isError`), never a dead server (a wrong argument is named, with
//! what it takes: [`arguments`]); every malformed frame gets a
//! JSON-RPC error reply ([`frames`]). Logs go to stderr: stdout carries
//! only the protocol.

pub mod arguments;
pub mod frames;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};

use anyhow::{Context, Result};
use rmcp::handler::server::router::tool::ToolRouter;
use arguments::Parameters;
use rmcp::model::{
    CallToolResult, ContentBlock, Implementation, InitializeResult, ProgressNotificationParam, ServerCapabilities,
};
use rmcp::service::RequestContext;
use rmcp::{tool, tool_handler, tool_router, RoleServer, ServerHandler, ServiceExt};
use rollout::localization::Localization;
use rollout::toolcall::ToolCall;
use rollout::tools::ToolRunner;
use schemars::JsonSchema;
use serde::Deserialize;

use crate::localize::{localize_until, Request, Search};
use trainer::episodes::{with_policy, TeacherOpts};

/// Longest string argument a tool takes (`path`, `repo`, `rev`, `glob`,
/// `select`); a longer one is refused by its length, not echoed.
pub const MAX_ARGUMENT_BYTES: usize = 4096;

/// Longest `issue` the `localize` tool takes (a longer one is refused by
/// its length; one under it longer than the token budget is cut).
pub const MAX_ISSUE_BYTES: usize = 1 << 20;

/// A localization for the worker, and where its progress and result go.
/// `cancel` is set once the call's handler is done with it (answered, or
/// cancelled by the client): the worker then never starts the job, or
/// stops it before the model's next token.
struct Job {
    request: Request,
    cancel: Arc<AtomicBool>,
    progress: tokio::sync::mpsc::UnboundedSender<crate::localize::Progress>,
    reply: tokio::sync::oneshot::Sender<std::result::Result<Localization, String>>,
}

/// The `localize` tool's arguments.
// The `///` docs are the schema's descriptions, sent to clients as they are:
// `[localize]` names a config section, not a link.
#[allow(rustdoc::broken_intra_doc_links)]
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LocalizeParams {
    /// The issue: what is wrong, as a user reports it.
    pub issue: String,
    /// The repository's path (a git work tree, or a plain folder searched as it is); default: the server's --repo.
    #[serde(default)]
    pub repo: Option<String>,
    /// A revision to search instead of the working tree as it is (uncommitted edits included).
    #[serde(default)]
    pub rev: Option<String>,
    /// The model's attempts (episodes, 1-64, default 1), in one batch, their answers ranked by votes; the search runs once besides. More attempts take longer (on a CPU, 4 took 2.3x the wall time of 1).
    #[serde(default)]
    #[schemars(range(min = 1, max = 64))]
    pub attempts: Option<usize>,
    /// With several attempts: `vote` (default) or `tournament` (the evidence judge's winner first).
    #[serde(default)]
    pub select: Option<String>,
    /// The attempts' sampling temperature (0: greedy); default: the server's config (several attempts under a greedy config sample at its [localize] attempts_temperature, 0.7 by default).
    #[serde(default)]
    pub temperature: Option<f64>,
    /// The most tokens of the issue kept: a longer one is cut to its beginning and its end, and the result says how many tokens were dropped; default: the server's config.
    #[serde(default)]
    pub max_issue_tokens: Option<usize>,
    /// Who searches: `combined` (the index search first, then the model's attempts), `model`, `search` (the index search alone, no model) or `scripted` (no model, ~0.1 s); default: the server's --policy.
    #[serde(default)]
    pub policy: Option<String>,
}

/// `grep`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GrepParams {
    /// A regular expression (Rust regex syntax).
    pub pattern: String,
    /// A file or folder to search under.
    #[serde(default)]
    pub path: Option<String>,
    /// A glob the file paths must match (e.g. `*.py`).
    #[serde(default)]
    pub glob: Option<String>,
    /// The repository's path; default: the server's --repo.
    #[serde(default)]
    pub repo: Option<String>,
    /// A revision instead of the working tree.
    #[serde(default)]
    pub rev: Option<String>,
}

/// `glob`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GlobParams {
    /// A glob over the repository's paths (e.g. `src/**/*.py`).
    pub pattern: String,
    /// The repository's path; default: the server's --repo.
    #[serde(default)]
    pub repo: Option<String>,
    /// A revision instead of the working tree.
    #[serde(default)]
    pub rev: Option<String>,
}

/// `read_file`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadParams {
    /// The file's path in the repository.
    pub path: String,
    /// First line (1-based).
    #[serde(default)]
    pub start_line: Option<u64>,
    /// Last line (inclusive).
    #[serde(default)]
    pub end_line: Option<u64>,
    /// The repository's path; default: the server's --repo.
    #[serde(default)]
    pub repo: Option<String>,
    /// A revision instead of the working tree.
    #[serde(default)]
    pub rev: Option<String>,
}

/// The server: a queue to the localizer's worker, the sandboxed tools.
#[derive(Clone)]
pub struct Server {
    tool_router: ToolRouter<Self>,
    jobs: Arc<Mutex<mpsc::Sender<Job>>>,
    default_repo: Option<PathBuf>,
    tools: Arc<ToolRunner>,
    /// The snapshots the sandboxed tools read, shared between calls.
    snapshots: Arc<Snapshots>,
    /// The server's --policy: what a call without `policy` gets.
    search: Search,
    /// Whether the served config gives the model the index search as a
    /// tool (`[env.tools] search`): what the instructions say it calls.
    search_tool: bool,
}

/// The snapshots the sandboxed tools read: calls on the same repository
/// and revision that overlap share one load (eight greps at once read the
/// tree once), and at most [`MAX_LOADS`] different trees load at a time, so
/// the memory of any burst of calls stays near that of two snapshots. A
/// call that comes after a load has finished loads afresh: the working
/// tree may have changed since.
pub struct Snapshots {
    loading: Mutex<std::collections::HashMap<(PathBuf, Option<String>), Arc<Load>>>,
    slots: std::sync::Condvar,
    busy: Mutex<usize>,
}

/// One load of a snapshot, awaited by every call that asked for it meanwhile.
type Load = std::sync::OnceLock<std::result::Result<Arc<rollout::repo::Snapshot>, String>>;

/// Different snapshots loading at once, at most.
pub const MAX_LOADS: usize = 2;

impl Default for Snapshots {
    fn default() -> Self {
        Snapshots { loading: Mutex::default(), slots: std::sync::Condvar::new(), busy: Mutex::new(0) }
    }
}

impl Snapshots {
    /// The snapshot `request` asks for (its repository and revision).
    pub fn get(&self, request: &Request) -> std::result::Result<Arc<rollout::repo::Snapshot>, String> {
        let repo = std::fs::canonicalize(&request.repo).unwrap_or_else(|_| request.repo.clone());
        let key = (repo, request.rev.clone());
        let load = self.loading.lock().unwrap_or_else(|p| p.into_inner()).entry(key.clone()).or_default().clone();
        let result = load
            .get_or_init(|| {
                let _slot = self.slot();
                crate::localize::snapshot(request).map(|(_, s)| s).map_err(|e| format!("{e:#}"))
            })
            .clone();
        let mut loading = self.loading.lock().unwrap_or_else(|p| p.into_inner());
        if loading.get(&key).is_some_and(|l| Arc::ptr_eq(l, &load)) {
            loading.remove(&key);
        }
        result
    }

    /// Waits for one of the [`MAX_LOADS`] slots; freed when dropped.
    fn slot(&self) -> impl Drop + '_ {
        let mut busy = self.busy.lock().unwrap_or_else(|p| p.into_inner());
        while *busy >= MAX_LOADS {
            busy = self.slots.wait(busy).unwrap_or_else(|p| p.into_inner());
        }
        *busy += 1;
        Slot(self)
    }
}

struct Slot<'a>(&'a Snapshots);

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        *self.0.busy.lock().unwrap_or_else(|p| p.into_inner()) -= 1;
        self.0.slots.notify_one();
    }
}

/// Sets its flag when dropped.
struct SetOnDrop(Arc<AtomicBool>);

impl Drop for SetOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

fn tool_error(message: impl Into<String>) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(message.into())])
}

/// Refuses a string argument over [`MAX_ARGUMENT_BYTES`], saying its
/// length and the cap (never its text).
fn check_lengths(arguments: &[(&str, Option<&str>)]) -> std::result::Result<(), CallToolResult> {
    match arguments.iter().find_map(|(name, v)| v.filter(|v| v.len() > MAX_ARGUMENT_BYTES).map(|v| (name, v.len()))) {
        Some((name, len)) => Err(tool_error(format!("`{name}` is {len} bytes long; arguments are capped at {MAX_ARGUMENT_BYTES} bytes"))),
        None => Ok(()),
    }
}

impl Server {
    fn repo(&self, given: Option<String>) -> std::result::Result<PathBuf, CallToolResult> {
        given
            .map(PathBuf::from)
            .or_else(|| self.default_repo.clone())
            .ok_or_else(|| tool_error("no repository: give `repo` (a git work tree's or a folder's path), or start the server with --repo"))
    }

    /// Runs one sandboxed tool on the repository's snapshot.
    async fn sandboxed(&self, name: &str, arguments: serde_json::Value, repo: Option<String>, rev: Option<String>) -> CallToolResult {
        let strings: Vec<(&str, Option<&str>)> = ["path", "glob"].iter().map(|k| (*k, arguments.get(*k).and_then(|v| v.as_str()))).collect();
        if let Err(e) = check_lengths(&strings).and_then(|()| check_lengths(&[("repo", repo.as_deref()), ("rev", rev.as_deref())])) {
            return e;
        }
        let repo = match self.repo(repo) {
            Ok(r) => r,
            Err(e) => return e,
        };
        let tools = self.tools.clone();
        let snapshots = self.snapshots.clone();
        let name = name.to_string();
        let run = tokio::task::spawn_blocking(move || -> std::result::Result<CallToolResult, String> {
            let request = Request { rev, search: Search::Scripted, ..Request::new("-".into(), repo) };
            let snapshot = snapshots.get(&request)?;
            let serde_json::Value::Object(arguments) = arguments else { return Err("arguments must be an object".into()) };
            let result = tools.run(&snapshot, &ToolCall { name, arguments });
            Ok(if result.error { tool_error(result.output) } else { CallToolResult::success(vec![ContentBlock::text(result.output)]) })
        });
        match run.await {
            Ok(Ok(r)) => r,
            Ok(Err(message)) => tool_error(message),
            Err(e) => tool_error(format!("the tool failed: {e}")),
        }
    }
}

#[tool_router(router = tool_router)]
impl Server {
    /// Localize an issue: the files and functions to change, ranked, each with the tool call that led there.
    #[tool(name = "localize", description = localize_description(true), annotations(title = "Localize an issue", read_only_hint = true, destructive_hint = false, idempotent_hint = false, open_world_hint = false), output_schema = rmcp::handler::server::tool::schema_for_output::<Localization>())]
    async fn localize(
        &self,
        Parameters(p): Parameters<LocalizeParams>,
        context: RequestContext<RoleServer>,
    ) -> std::result::Result<CallToolResult, rmcp::ErrorData> {
        let p = match p {
            Ok(p) => p,
            Err(e) => return Ok(tool_error(e)),
        };
        if let Err(e) = check_lengths(&[("repo", p.repo.as_deref()), ("rev", p.rev.as_deref()), ("select", p.select.as_deref()), ("policy", p.policy.as_deref())]) {
            return Ok(e);
        }
        if p.issue.len() > MAX_ISSUE_BYTES {
            return Ok(tool_error(format!(
                "`issue` is {} bytes long; an issue is capped at {MAX_ISSUE_BYTES} bytes (GitHub caps an issue's body at 65,536 characters): give its text, not attachments",
                p.issue.len()
            )));
        }
        let repo = match self.repo(p.repo) {
            Ok(r) => r,
            Err(e) => return Ok(e),
        };
        let tournament = match p.select.as_deref() {
            None | Some("vote") => false,
            Some("tournament") => true,
            Some(other) => return Ok(tool_error(format!("select `{other}`: expected vote or tournament"))),
        };
        let search = match p.policy.as_deref().map(str::parse::<Search>) {
            None => self.search.clone(),
            Some(Ok(s)) if s.needs_model() && !self.search.needs_model() => {
                return Ok(tool_error(format!(
                    "policy `{}`: this server was started with --policy {} and has no model loaded; call with policy `scripted` or `search`",
                    s.name(),
                    self.search.name()
                )))
            }
            Some(Ok(s)) => s,
            Some(Err(e)) => return Ok(tool_error(format!("policy {e}"))),
        };
        let request = Request {
            rev: p.rev,
            attempts: p.attempts.unwrap_or(1),
            tournament,
            temperature: p.temperature,
            max_issue_tokens: p.max_issue_tokens,
            search,
            ..Request::new(p.issue, repo)
        };
        if let Err(e) = crate::localize::check_request(&request) {
            return Ok(tool_error(format!("{e:#}")));
        }
        let (progress, mut progress_rx) = tokio::sync::mpsc::unbounded_channel();
        let (reply, mut reply_rx) = tokio::sync::oneshot::channel();
        let cancel = Arc::new(AtomicBool::new(false));
        // However this handler ends (a reply, the client's cancel, the
        // server's end), its job stops.
        let _stop = SetOnDrop(cancel.clone());
        let sent = self.jobs.lock().map_err(|_| ()).and_then(|jobs| jobs.send(Job { request, cancel, progress, reply }).map_err(|_| ()));
        if sent.is_err() {
            return Ok(tool_error("the localizer's worker has stopped; restart the server"));
        }
        let token = context.meta.get_progress_token();
        let notify = |p: crate::localize::Progress| {
            let client = context.peer.clone();
            let token = token.clone();
            async move {
                if let Some(token) = token {
                    let note = ProgressNotificationParam::new(token, p.step as f64).with_total(p.total as f64).with_message(p.message);
                    let _ = client.notify_progress(note).await;
                }
            }
        };
        let outcome = loop {
            tokio::select! {
                Some(p) = progress_rx.recv() => notify(p).await,
                r = &mut reply_rx => break r,
                () = context.ct.cancelled() => {
                    // rmcp sends no response to a cancelled call; `_stop`
                    // tells the worker to stop this job.
                    tracing::info!(id = %context.id, "fusegrpo mcp: localize cancelled by the client");
                    return Ok(tool_error("cancelled by the client"));
                }
            }
        };
        // The worker sends every attempt's progress before its reply: what
        // the select left behind goes out before the result.
        while let Ok(p) = progress_rx.try_recv() {
            notify(p).await;
        }
        Ok(match outcome {
            Ok(Ok(loc)) => {
                let mut result = CallToolResult::structured(serde_json::to_value(&loc).unwrap_or_default());
                let mut text = loc.render();
                if loc.files.is_empty() && loc.answered == 0 {
                    text = format!("the localizer ended without an answer; what its tools found is below\n{text}");
                } else if loc.files.is_empty() {
                    text = format!("the localizer's answers named no file of the repository; what its tools found is below\n{text}");
                }
                result.content = vec![ContentBlock::text(text)];
                result
            }
            Ok(Err(message)) => tool_error(message),
            Err(_) => tool_error("the localizer's worker stopped during this call; restart the server"),
        })
    }

    /// grep over the repository.
    #[tool(name = "grep", annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false), description = "Search the repository's files for a regular expression (read-only); prints path:line: text, capped.")]
    async fn grep(&self, Parameters(p): Parameters<GrepParams>) -> CallToolResult {
        let p = match p {
            Ok(p) => p,
            Err(e) => return tool_error(e),
        };
        let mut args = serde_json::json!({ "pattern": p.pattern });
        if let Some(path) = p.path {
            args["path"] = path.into();
        }
        if let Some(glob) = p.glob {
            args["glob"] = glob.into();
        }
        self.sandboxed("grep", args, p.repo, p.rev).await
    }

    /// glob over the repository's paths.
    #[tool(name = "glob", annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false), description = "List the repository's file paths that match a glob (read-only), capped.")]
    async fn glob(&self, Parameters(p): Parameters<GlobParams>) -> CallToolResult {
        let p = match p {
            Ok(p) => p,
            Err(e) => return tool_error(e),
        };
        self.sandboxed("glob", serde_json::json!({ "pattern": p.pattern }), p.repo, p.rev).await
    }

    /// read_file of the repository.
    #[tool(name = "read_file", annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false), description = "Read numbered lines of a file of the repository (read-only), capped.")]
    async fn read_file(&self, Parameters(p): Parameters<ReadParams>) -> CallToolResult {
        let p = match p {
            Ok(p) => p,
            Err(e) => return tool_error(e),
        };
        let mut args = serde_json::json!({ "path": p.path });
        if let Some(s) = p.start_line {
            args["start_line"] = s.into();
        }
        if let Some(e) = p.end_line {
            args["end_line"] = e.into();
        }
        self.sandboxed("read_file", args, p.repo, p.rev).await
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Server {
    fn get_info(&self) -> InitializeResult {
        InitializeResult::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("fusegrpo", env!("CARGO_PKG_VERSION")))
            .with_instructions(instructions(self.search_tool))
    }
}

/// How the shipped localizer did on held-out repositories and what a call
/// costs, from [`crate::localize::MEASURED`].
fn measured() -> String {
    let m = &crate::localize::MEASURED;
    format!(
        "Measured on {} held-out tasks of {} repositories the shipped localizer (SmolLM2-135M with a LoRA adapter, configs/smollm2-real.toml) never saw: \
         by default (policy `combined`) an index search of the repository (BM25F over files, functions and classes, no model) ranks first and the model adds what it found after it. \
         The index search alone (policy `search`, ~{:.1} s): file F1 {:.3}, a right file in the top 5 for {:.0}% of the issues, a right function in the top 5 for {:.0}%; \
         the old scripted grep search: {:.3} and {:.0}%; the model alone (greedy, one attempt): file F1 {:.3} and {:.0}%, answering in {:.0}% of them. \
         Every file and function returned exists in the repository; what the model named that does not is listed apart. \
         A call takes about {:.0}-{:.0} s per attempt of the model on {} (several attempts run in one batch: 4 took {:.1}x the wall time of 1; policies `search` and `scripted` load no model).",
        m.tasks,
        m.repos,
        m.search_seconds,
        m.search.0,
        m.search.1 * 100.0,
        m.search.2 * 100.0,
        m.scripted.0,
        m.scripted.1 * 100.0,
        m.model.0,
        m.model.1 * 100.0,
        m.answered * 100.0,
        m.seconds.0,
        m.seconds.1,
        m.cpu,
        m.four_attempts
    )
}

/// The read-only tools the served model calls: the index search among
/// them when the config declares it (`[env.tools] search`).
fn model_tools(search_tool: bool) -> &'static str {
    if search_tool {
        "the index search, grep, glob and read_file"
    } else {
        "grep, glob and read_file"
    }
}

/// The server's instructions to the agent, for a model with the index
/// search as a tool or without it.
pub fn instructions(search_tool: bool) -> String {
    format!(
        "`localize` runs a small trained model over a repository ({}, read-only) and returns a ranked hint: \
         the files and functions it names for an issue, each with the tool output that led there. Verify them (read the code) \
         before relying on them: it is often wrong. {} `grep`, `glob` and `read_file` read the same repository without the model (fast).",
        model_tools(search_tool),
        measured()
    )
}

/// The `localize` tool's description, for a model with the index search
/// as a tool or without it.
pub fn localize_description(search_tool: bool) -> String {
    format!(
        "Localize an issue in a repository (a git work tree as it is, a revision, or a plain folder): a small trained model searches it \
         with {} and names the files and functions to change, ranked by the attempts that named them, each with \
         the tool call and output line that led there, and the cost (wall seconds). A hint to verify, not an answer. {} \
         An issue over the token budget is cut (its beginning and end kept) and the result says how many tokens were dropped. Read-only.",
        model_tools(search_tool),
        measured()
    )
}

/// Serves the localizer of `cfg` (`search`: the index search and the
/// model combined, the model alone, or the index or scripted search alone,
/// with no model loaded) over MCP on stdio until the client closes stdin; a call
/// without `repo` searches `default_repo`.
pub fn serve(cfg: trainer::run_config::RunConfig, search: Search, default_repo: Option<PathBuf>) -> Result<()> {
    let policy = search.loads();
    let search_tool = cfg.env.tools.search;
    let tools = Arc::new(ToolRunner::new(cfg.env.tools.clone()).with_search(cfg.search.clone(), rollout::search::IndexCache::shared()));
    let (jobs, jobs_rx) = mpsc::channel::<Job>();
    let (ready_tx, ready_rx) = mpsc::channel::<std::result::Result<(), String>>();
    let worker = std::thread::spawn(move || {
        let served = with_policy(&cfg, &policy, &TeacherOpts::default(), |policy, env| {
            let _ = ready_tx.send(Ok(()));
            for job in jobs_rx {
                if job.cancel.load(Ordering::Relaxed) {
                    tracing::info!("fusegrpo mcp: a cancelled localize call was dropped from the queue");
                    continue;
                }
                let progress = job.progress.clone();
                let result = localize_until(&cfg, policy, env, &job.request, &mut |p| {
                    let _ = progress.send(p.clone());
                }, &job.cancel);
                if let Err(e) = &result {
                    if job.cancel.load(Ordering::Relaxed) {
                        tracing::info!("fusegrpo mcp: a cancelled localize call stopped: {e:#}");
                    }
                }
                let _ = job.reply.send(result.map_err(|e| format!("{e:#}")));
            }
            Ok::<(), anyhow::Error>(())
        });
        if let Err(e) = served {
            let _ = ready_tx.send(Err(format!("{e:#}")));
        }
    });
    match ready_rx.recv() {
        Ok(Ok(())) => trainer::progress::say("fusegrpo mcp: the localizer is loaded; serving MCP over stdio"),
        Ok(Err(e)) => anyhow::bail!("fusegrpo mcp: loading the localizer: {e}"),
        Err(_) => anyhow::bail!("fusegrpo mcp: the localizer's worker stopped while loading"),
    }
    let mut tool_router = Server::tool_router();
    if let Some(route) = tool_router.map.get_mut("localize") {
        route.attr.description = Some(localize_description(search_tool).into());
    }
    let server = Server { tool_router, jobs: Arc::new(Mutex::new(jobs)), default_repo, tools, snapshots: Arc::default(), search, search_tool };
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().context("starting the async runtime")?;
    let served = runtime.block_on(async move {
        let (transport, writer) = frames::transport(tokio::io::stdin(), tokio::io::stdout());
        let service = server.serve(transport).await.context("the MCP handshake")?;
        service.waiting().await.context("serving MCP")?;
        // Every reply queued before the end is written before the exit.
        let _ = writer.await;
        anyhow::Ok(())
    });
    // A read of stdin still blocked on its thread must not hold the exit.
    runtime.shutdown_background();
    served?;
    drop(worker);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{instructions, localize_description};

    /// The instructions and the `localize` description name the model's
    /// tools as the served config declares them (the index search or not).
    #[test]
    fn the_texts_name_the_tools_the_model_has() {
        for text in [instructions(true), localize_description(true)] {
            assert!(text.contains("the index search, grep, glob and read_file"), "{text}");
        }
        for text in [instructions(false), localize_description(false)] {
            assert!(text.contains("grep, glob and read_file") && !text.contains("the index search, grep"), "{text}");
        }
    }
}
