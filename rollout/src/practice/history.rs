//! The history: each commit edits one or two functions of the
//! [`Codebase`] and describes the change like an issue, at one of three
//! [`Difficulty`] levels (naming the function, quoting an error message or
//! identifier, or describing the behaviour only). A few release commits
//! touch only `__version__` and have short messages (history filters skip them).

use rand::seq::IndexedRandom;
use rand::Rng;
use rand_chacha::ChaCha8Rng;

use super::build::Codebase;
use super::code::{fmt_num, message_text, rename_in, CmpOp, Cond, Function, Message, Operand, ParamKind, Stmt, STYLES};
use super::vocab::local_alternatives;

/// How much of the answer a commit message gives away.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Difficulty {
    /// Names the function (`Class.method` in backticks).
    Named,
    /// Quotes an error message or an identifier from the code, not the function.
    Quoted,
    /// Describes the behaviour in domain words only.
    Described,
}

/// Where a function lives: module index, class index (None: module level), function index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FnLoc {
    /// Index into `Codebase::modules`.
    pub module: usize,
    /// Index into the module's classes, or None for a module-level function.
    pub class: Option<usize>,
    /// Index into the methods or functions.
    pub index: usize,
}

/// Every function of the codebase.
pub fn locations(code: &Codebase) -> Vec<FnLoc> {
    let mut locs = Vec::new();
    for (m, module) in code.modules.iter().enumerate() {
        for (c, class) in module.classes.iter().enumerate() {
            locs.extend((0..class.methods.len()).map(|i| FnLoc { module: m, class: Some(c), index: i }));
        }
        locs.extend((0..module.functions.len()).map(|i| FnLoc { module: m, class: None, index: i }));
    }
    locs
}

fn function_mut(code: &mut Codebase, loc: FnLoc) -> &mut Function {
    let module = &mut code.modules[loc.module];
    match loc.class {
        Some(c) => &mut module.classes[c].methods[loc.index],
        None => &mut module.functions[loc.index],
    }
}

/// `Class.method` or `func`.
pub fn qualname(code: &Codebase, loc: FnLoc) -> String {
    let module = &code.modules[loc.module];
    match loc.class {
        Some(c) => format!("{}.{}", module.classes[c].name, module.classes[c].methods[loc.index].name),
        None => module.functions[loc.index].name.clone(),
    }
}

/// One commit message at each difficulty (the quoted one where the edit has something to quote).
struct Texts {
    named: String,
    quoted: Option<String>,
    described: String,
}

impl Texts {
    fn pick(self, difficulty: Difficulty) -> String {
        match difficulty {
            Difficulty::Named => self.named,
            Difficulty::Quoted => self.quoted.unwrap_or(self.described),
            Difficulty::Described => self.described,
        }
    }
}

/// The kinds of edit a commit makes to a function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum EditKind {
    /// `<` <-> `<=` (or `>` <-> `>=`) in a numeric guard.
    FlipBoundary,
    /// Another phrasing of a guard's error.
    RewordMessage,
    /// A new `< 0` or `is None` check of a parameter.
    AddGuard,
    /// Drop one of several guards.
    RemoveGuard,
    /// Another number in a threshold or limit.
    ChangeThreshold,
    /// Rename a local variable.
    RenameLocal,
    /// Another numeric parameter default.
    ChangeDefault,
}

const EDITS: &[EditKind] = &[
    EditKind::FlipBoundary,
    EditKind::RewordMessage,
    EditKind::AddGuard,
    EditKind::RemoveGuard,
    EditKind::ChangeThreshold,
    EditKind::ChangeThreshold,
    EditKind::RenameLocal,
    EditKind::ChangeDefault,
    EditKind::AddGuard,
    EditKind::FlipBoundary,
];

/// Draws a difficulty: 40% named, 35% quoted, 25% described.
pub fn draw_difficulty(rng: &mut ChaCha8Rng) -> Difficulty {
    match rng.random_range(0..20) {
        0..=7 => Difficulty::Named,
        8..=14 => Difficulty::Quoted,
        _ => Difficulty::Described,
    }
}

/// Applies one random edit to the function at `loc`; returns the commit
/// text, or None when no drawn edit applies to it.
pub fn edit_function(code: &mut Codebase, loc: FnLoc, difficulty: Difficulty, rng: &mut ChaCha8Rng) -> Option<String> {
    let name = qualname(code, loc);
    let f = function_mut(code, loc);
    for _ in 0..8 {
        let kind = *EDITS.choose(rng).expect("non-empty");
        let texts = match kind {
            EditKind::FlipBoundary => flip_boundary(f, &name, rng),
            EditKind::RewordMessage => reword_message(f, &name, rng),
            EditKind::AddGuard => add_guard(f, &name, rng),
            EditKind::RemoveGuard => remove_guard(f, &name, rng),
            EditKind::ChangeThreshold => change_threshold(f, &name, rng),
            EditKind::RenameLocal => rename_local(f, &name, rng),
            EditKind::ChangeDefault => change_default(f, &name, rng),
        };
        if let Some(texts) = texts {
            return Some(texts.pick(difficulty));
        }
    }
    None
}

/// Indices of top-level guards with derived messages and numeric bounds.
fn numeric_guards(f: &Function) -> Vec<usize> {
    (0..f.body.len())
        .filter(|&i| matches!(&f.body[i], Stmt::Guard { cond, message: Message::Derived { .. }, .. } if matches!(cond.right, Operand::Num(_)) && cond.op.flip_strictness().is_some()))
        .collect()
}

fn guard_parts(stmt: &Stmt) -> (&Cond, &Message) {
    match stmt {
        Stmt::Guard { cond, message, .. } => (cond, message),
        _ => unreachable!("callers pass guards"),
    }
}

fn label_of(message: &Message) -> String {
    match message {
        Message::Derived { label, .. } => label.clone(),
        Message::Fixed(text) => text.clone(),
    }
}

fn flip_boundary(f: &mut Function, name: &str, rng: &mut ChaCha8Rng) -> Option<Texts> {
    let i = *numeric_guards(f).choose(rng)?;
    let phrase = f.phrase.clone();
    let Stmt::Guard { cond, message, .. } = &mut f.body[i] else { return None };
    let old = message_text(cond, message);
    let label = label_of(message);
    let n = cond.right.render();
    cond.op = cond.op.flip_strictness()?;
    let new = message_text(cond, message);
    let now_rejects = matches!(cond.op, CmpOp::Le | CmpOp::Ge);
    Some(if now_rejects {
        Texts {
            named: format!("`{name}` accepts {label} of exactly {n}; that value must be rejected too (\"{new}\")."),
            quoted: Some(format!("The check that raises \"{old}\" lets a value of exactly {n} through; {n} itself must be rejected.")),
            described: format!("Off-by-one when {phrase}: {label} of exactly {n} is accepted although it must be refused."),
        }
    } else {
        Texts {
            named: format!("`{name}` rejects {label} of exactly {n}, but {n} is a valid value; only values beyond it should fail."),
            quoted: Some(format!("\"{old}\" is raised for a value of exactly {n}; {n} itself is valid.")),
            described: format!("Off-by-one when {phrase}: {label} of exactly {n} is refused although it is allowed."),
        }
    })
}

fn reword_message(f: &mut Function, name: &str, rng: &mut ChaCha8Rng) -> Option<Texts> {
    let guards: Vec<usize> =
        (0..f.body.len()).filter(|&i| matches!(&f.body[i], Stmt::Guard { message: Message::Derived { .. }, .. })).collect();
    let i = *guards.choose(rng)?;
    let phrase = f.phrase.clone();
    let Stmt::Guard { cond, message: Message::Derived { label, style }, .. } = &mut f.body[i] else { return None };
    let old = message_text(cond, &Message::Derived { label: label.clone(), style: *style });
    *style = (*style + rng.random_range(1..STYLES)) % STYLES;
    let new = message_text(cond, &Message::Derived { label: label.clone(), style: *style });
    Some(Texts {
        named: format!("Reword the error raised by `{name}`: \"{old}\" should read \"{new}\"."),
        quoted: Some(format!("The error message \"{old}\" is unclear to users; it should say \"{new}\".")),
        described: format!("Users find the error shown when {phrase} confusing; it should say \"{new}\"."),
    })
}

fn add_guard(f: &mut Function, name: &str, rng: &mut ChaCha8Rng) -> Option<Texts> {
    let guarded = |p: &str| f.body.iter().any(|s| matches!(s, Stmt::Guard { cond, .. } if cond.left == p));
    let free: Vec<usize> = (0..f.params.len()).filter(|&i| !guarded(&f.params[i].name) && f.params[i].default.is_none()).collect();
    let p = f.params[*free.choose(rng)?].clone();
    let (cond, exc, what) = match p.kind {
        ParamKind::Number => (Cond::new(&p.name, CmpOp::Lt, Operand::Num(0.0)), "ValueError", format!("negative {}", p.label)),
        ParamKind::Object => (Cond::new(&p.name, CmpOp::Is, Operand::Code("None".into())), "TypeError", format!("a missing {}", p.label)),
    };
    let message = Message::Derived { label: p.label.clone(), style: rng.random_range(0..STYLES) };
    let new = message_text(&cond, &message);
    let at = f.body.iter().take_while(|s| matches!(s, Stmt::Guard { .. })).count();
    // Insert before the first statement that is not a guard (never past the end of the body).
    f.body.insert(at.min(f.body.len() - 1), Stmt::Guard { cond, exc, message });
    let phrase = &f.phrase;
    Some(Texts {
        named: format!("`{name}` silently accepts {what}; it should raise {exc}(\"{new}\")."),
        quoted: Some(format!("Nothing rejects {what} passed as `{}`; raise {exc} with \"{new}\" like the other checks do.", p.name)),
        described: format!("No validation of {what} when {phrase}: the bad value propagates and fails much later."),
    })
}

fn remove_guard(f: &mut Function, name: &str, rng: &mut ChaCha8Rng) -> Option<Texts> {
    let guards: Vec<usize> = (0..f.body.len()).filter(|&i| matches!(f.body[i], Stmt::Guard { .. })).collect();
    if guards.len() < 2 {
        return None;
    }
    let i = *guards.choose(rng)?;
    let (cond, message) = guard_parts(&f.body[i]);
    let old = message_text(cond, message);
    f.body.remove(i);
    let phrase = &f.phrase;
    Some(Texts {
        named: format!("`{name}` should no longer raise \"{old}\"; callers already validate this and the check blocks legitimate input."),
        quoted: Some(format!("Drop the check that raises \"{old}\": it duplicates validation done by the callers.")),
        described: format!("Validation is too strict when {phrase}: one of its checks rejects input that callers have already validated."),
    })
}

/// A new value near `n`, different from it.
fn nudge(n: f64, rng: &mut ChaCha8Rng) -> f64 {
    if n > 0.0 && n < 1.0 {
        let steps = [0.05, 0.1, 0.15, 0.2, 0.25, 0.3];
        let options: Vec<f64> = steps.into_iter().filter(|s| (s - n).abs() > 1e-9).collect();
        return *options.choose(rng).expect("non-empty");
    }
    let factors = [0.5, 0.8, 1.2, 1.5, 2.0];
    let m = (n * factors.choose(rng).expect("non-empty")).round();
    if m == n || m <= 0.0 {
        n + 1.0
    } else {
        m
    }
}

fn change_threshold(f: &mut Function, name: &str, rng: &mut ChaCha8Rng) -> Option<Texts> {
    // Thresholds of `if` blocks and upper limits of derived guards (their message follows the number).
    let candidates: Vec<usize> = (0..f.body.len())
        .filter(|&i| match &f.body[i] {
            Stmt::If { cond, .. } => matches!(cond.right, Operand::Num(_)),
            Stmt::Guard { cond, message: Message::Derived { .. }, .. } => {
                matches!(cond.right, Operand::Num(n) if n > 0.0) && matches!(cond.op, CmpOp::Gt | CmpOp::Ge)
            }
            _ => false,
        })
        .collect();
    let i = *candidates.choose(rng)?;
    let phrase = f.phrase.clone();
    let (cond, old_msg) = match &mut f.body[i] {
        Stmt::If { cond, .. } => (cond, None),
        Stmt::Guard { cond, message, .. } => {
            let text = message_text(cond, message);
            (cond, Some(text))
        }
        _ => return None,
    };
    let Operand::Num(n) = cond.right else { return None };
    let m = nudge(n, rng);
    cond.right = Operand::Num(m);
    let (n, m, left) = (fmt_num(n), fmt_num(m), cond.left.clone());
    // The charge's `if` also subtracts the free allowance: keep it in step.
    if let Some(Stmt::If { body, .. }) = f.body.get_mut(i) {
        for s in body.iter_mut() {
            if let Stmt::Assign { expr, .. } = s {
                *expr = expr.replace(&format!("- {n})"), &format!("- {m})"));
            }
        }
    }
    let quoted = match old_msg {
        Some(text) => format!("\"{text}\": the limit is outdated; it should be {m}, not {n}."),
        None => format!("The `{left}` threshold of {n} is outdated; the agreed value is {m}."),
    };
    Some(Texts {
        named: format!("`{name}` still uses {n} as its threshold; the agreed value is {m}."),
        quoted: Some(quoted),
        described: format!("When {phrase}, the cut-off should be {m} instead of {n}."),
    })
}

/// Local variables a body assigns (not parameters, not attributes).
fn locals(f: &Function) -> Vec<String> {
    let mut out: Vec<String> = f
        .body
        .iter()
        .filter_map(|s| match s {
            Stmt::Assign { target, .. } if !target.contains('.') => Some(target.clone()),
            _ => None,
        })
        .filter(|t| !f.params.iter().any(|p| &p.name == t))
        .collect();
    out.dedup();
    out
}

fn rename_local(f: &mut Function, name: &str, rng: &mut ChaCha8Rng) -> Option<Texts> {
    let old = locals(f).choose(rng)?.clone();
    let taken = |n: &str| f.params.iter().any(|p| p.name == n) || locals(f).iter().any(|l| l == n) || n == f.name;
    let options: Vec<&str> = local_alternatives(&old).into_iter().filter(|n| !taken(n)).collect();
    let new = options.choose(rng)?.to_string();
    rename_in(&mut f.body, &old, &new);
    let phrase = &f.phrase;
    Some(Texts {
        named: format!("Readability: rename the local `{old}` to `{new}` in `{name}`."),
        quoted: Some(format!("The variable name `{old}` is misleading where it is used for {phrase}; call it `{new}`.")),
        described: format!("Clean up the naming of the intermediate value used when {phrase}; it should be called `{new}`."),
    })
}

fn change_default(f: &mut Function, name: &str, rng: &mut ChaCha8Rng) -> Option<Texts> {
    let numeric: Vec<usize> = (0..f.params.len()).filter(|&i| matches!(f.params[i].default, Some(Operand::Num(n)) if n > 0.0)).collect();
    let i = *numeric.choose(rng)?;
    let Some(Operand::Num(n)) = f.params[i].default else { return None };
    let m = nudge(n, rng);
    f.params[i].default = Some(Operand::Num(m));
    let (p, label, phrase) = (f.params[i].name.clone(), f.params[i].label.clone(), f.phrase.clone());
    let (n, m) = (fmt_num(n), fmt_num(m));
    Some(Texts {
        named: format!("The default `{p}` of `{name}` should be {m}, not {n}."),
        quoted: Some(format!("Callers that omit `{p}` get {n}; the default should be {m} as agreed with finance.")),
        described: format!("The default {label} used when {phrase} should be {m} instead of {n}."),
    })
}
