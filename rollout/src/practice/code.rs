//! A small model of the Python the practice repository holds (modules,
//! classes, functions, a handful of statement kinds) and its rendering.
//! Edits act on this model and the files are rendered again, so every
//! commit is valid Python and a diff touches only the edited function.

use std::fmt::Write;

/// A comparison in an `if`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmpOp {
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `==`
    Eq,
    /// `is`
    Is,
}

impl CmpOp {
    /// The Python operator.
    pub fn as_str(self) -> &'static str {
        match self {
            CmpOp::Lt => "<",
            CmpOp::Le => "<=",
            CmpOp::Gt => ">",
            CmpOp::Ge => ">=",
            CmpOp::Eq => "==",
            CmpOp::Is => "is",
        }
    }

    /// The same bound with the other strictness (`<` <-> `<=`, `>` <-> `>=`).
    pub fn flip_strictness(self) -> Option<CmpOp> {
        match self {
            CmpOp::Lt => Some(CmpOp::Le),
            CmpOp::Le => Some(CmpOp::Lt),
            CmpOp::Gt => Some(CmpOp::Ge),
            CmpOp::Ge => Some(CmpOp::Gt),
            CmpOp::Eq | CmpOp::Is => None,
        }
    }
}

/// The right-hand side of a comparison or a parameter default.
#[derive(Clone, Debug, PartialEq)]
pub enum Operand {
    /// A number literal (edits may change it).
    Num(f64),
    /// Any other expression, verbatim.
    Code(String),
}

impl Operand {
    /// Python source of the operand.
    pub fn render(&self) -> String {
        match self {
            Operand::Num(n) => fmt_num(*n),
            Operand::Code(c) => c.clone(),
        }
    }
}

/// A number as Python source: `20`, `0.15`.
pub fn fmt_num(n: f64) -> String {
    if n.fract() == 0.0 {
        format!("{}", n as i64)
    } else {
        format!("{n}")
    }
}

/// `left op right`.
#[derive(Clone, Debug, PartialEq)]
pub struct Cond {
    /// Left side, verbatim.
    pub left: String,
    /// The comparison.
    pub op: CmpOp,
    /// Right side.
    pub right: Operand,
}

impl Cond {
    /// A new condition.
    pub fn new(left: impl Into<String>, op: CmpOp, right: Operand) -> Cond {
        Cond { left: left.into(), op, right }
    }

    fn render(&self) -> String {
        format!("{} {} {}", self.left, self.op.as_str(), self.right.render())
    }
}

/// The text of a guard's error.
#[derive(Clone, Debug, PartialEq)]
pub enum Message {
    /// Written from the guard's condition: `label` in phrasing `style`.
    Derived {
        /// What is checked, in words (`invoice total`).
        label: String,
        /// Which phrasing (an index into the phrasings of the condition's kind).
        style: usize,
    },
    /// Fixed text.
    Fixed(String),
}

/// How many phrasings each derived message kind has.
pub const STYLES: usize = 4;

/// The error text of a guard.
pub fn message_text(cond: &Cond, message: &Message) -> String {
    let (label, style) = match message {
        Message::Fixed(text) => return text.clone(),
        Message::Derived { label, style } => (label.as_str(), style % STYLES),
    };
    let n = cond.right.render();
    let phrasings: [String; STYLES] = match (cond.op, &cond.right) {
        (CmpOp::Lt, _) => [
            format!("{label} cannot be negative"),
            format!("{label} must not be negative"),
            format!("negative {label} is not allowed"),
            format!("{label} must be zero or greater"),
        ],
        (CmpOp::Le, _) => [
            format!("{label} must be positive"),
            format!("{label} must be greater than zero"),
            format!("{label} of zero or less is not allowed"),
            format!("a positive {label} is required"),
        ],
        (CmpOp::Gt, _) => [
            format!("{label} exceeds the limit of {n}"),
            format!("{label} must not exceed {n}"),
            format!("{label} above {n} is not allowed"),
            format!("{label} is larger than the maximum of {n}"),
        ],
        (CmpOp::Ge, _) => [
            format!("{label} must be below {n}"),
            format!("{label} must be less than {n}"),
            format!("{label} of {n} or more is not allowed"),
            format!("{label} reached the limit of {n}"),
        ],
        (CmpOp::Eq | CmpOp::Is, _) => [
            format!("{label} is required"),
            format!("{label} must be provided"),
            format!("missing {label}"),
            format!("{label} cannot be None"),
        ],
    };
    phrasings[style].clone()
}

/// Compound assignment operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AssignOp {
    /// `=`
    Set,
    /// `+=`
    Add,
    /// `-=`
    Sub,
}

impl AssignOp {
    fn as_str(self) -> &'static str {
        match self {
            AssignOp::Set => "=",
            AssignOp::Add => "+=",
            AssignOp::Sub => "-=",
        }
    }
}

/// One statement of a function body.
#[derive(Clone, Debug, PartialEq)]
pub enum Stmt {
    /// `if cond: raise exc("message")`.
    Guard {
        /// When to raise.
        cond: Cond,
        /// The exception class.
        exc: &'static str,
        /// The error text.
        message: Message,
    },
    /// `target op expr`.
    Assign {
        /// Where to.
        target: String,
        /// Which assignment.
        op: AssignOp,
        /// The value, verbatim.
        expr: String,
    },
    /// An expression statement, verbatim.
    Expr(String),
    /// `if cond:` and a body.
    If {
        /// The condition.
        cond: Cond,
        /// Its body.
        body: Vec<Stmt>,
    },
    /// `for target in iter:` and a body.
    For {
        /// Loop variables.
        target: String,
        /// What is iterated.
        iter: String,
        /// Its body.
        body: Vec<Stmt>,
    },
    /// `return expr`.
    Return(String),
}

/// What a parameter holds (which checks fit it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamKind {
    /// A number: may get a `< 0` check.
    Number,
    /// Anything else: may get an `is None` check.
    Object,
}

/// A function parameter (besides `self`).
#[derive(Clone, Debug, PartialEq)]
pub struct Param {
    /// Its name.
    pub name: String,
    /// Its default.
    pub default: Option<Operand>,
    /// What it holds.
    pub kind: ParamKind,
    /// It in words.
    pub label: String,
}

/// A function or method.
#[derive(Clone, Debug, PartialEq)]
pub struct Function {
    /// Its name.
    pub name: String,
    /// Parameters after `self`.
    pub params: Vec<Param>,
    /// The docstring.
    pub doc: String,
    /// What it does, as a gerund phrase for commit messages (`adding a line to an invoice`).
    pub phrase: String,
    /// The body after the docstring.
    pub body: Vec<Stmt>,
}

/// A class and its methods.
#[derive(Clone, Debug, PartialEq)]
pub struct Class {
    /// Its name.
    pub name: String,
    /// The docstring.
    pub doc: String,
    /// Methods in order.
    pub methods: Vec<Function>,
}

/// A Python module.
#[derive(Clone, Debug, PartialEq)]
pub struct Module {
    /// Repository-relative path.
    pub path: String,
    /// The module docstring.
    pub doc: String,
    /// Module-level constants (name, value source).
    pub constants: Vec<(String, String)>,
    /// Classes, before the functions.
    pub classes: Vec<Class>,
    /// Module-level functions.
    pub functions: Vec<Function>,
}

impl Module {
    /// Python source of the module.
    pub fn render(&self) -> String {
        let mut out = format!("\"\"\"{}\"\"\"\n", self.doc);
        if !self.constants.is_empty() {
            out.push('\n');
            for (name, value) in &self.constants {
                let _ = writeln!(out, "{name} = {value}");
            }
        }
        for class in &self.classes {
            let _ = write!(out, "\n\nclass {}:\n    \"\"\"{}\"\"\"\n", class.name, class.doc);
            for method in &class.methods {
                out.push('\n');
                render_function(&mut out, method, 1, true);
            }
        }
        for function in &self.functions {
            out.push_str("\n\n");
            render_function(&mut out, function, 0, false);
        }
        out
    }
}

fn render_function(out: &mut String, f: &Function, level: usize, method: bool) {
    let pad = "    ".repeat(level);
    let mut params: Vec<String> = if method { vec!["self".into()] } else { Vec::new() };
    params.extend(f.params.iter().map(|p| match &p.default {
        Some(d) => format!("{}={}", p.name, d.render()),
        None => p.name.clone(),
    }));
    let _ = writeln!(out, "{pad}def {}({}):", f.name, params.join(", "));
    let _ = writeln!(out, "{pad}    \"\"\"{}\"\"\"", f.doc);
    render_body(out, &f.body, level + 1);
}

fn render_body(out: &mut String, body: &[Stmt], level: usize) {
    let pad = "    ".repeat(level);
    for stmt in body {
        match stmt {
            Stmt::Guard { cond, exc, message } => {
                let text = message_text(cond, message);
                let _ = write!(out, "{pad}if {}:\n{pad}    raise {exc}(\"{text}\")\n", cond.render());
            }
            Stmt::Assign { target, op, expr } => {
                let _ = writeln!(out, "{pad}{target} {} {expr}", op.as_str());
            }
            Stmt::Expr(expr) => {
                let _ = writeln!(out, "{pad}{expr}");
            }
            Stmt::If { cond, body } => {
                let _ = writeln!(out, "{pad}if {}:", cond.render());
                render_body(out, body, level + 1);
            }
            Stmt::For { target, iter, body } => {
                let _ = writeln!(out, "{pad}for {target} in {iter}:");
                render_body(out, body, level + 1);
            }
            Stmt::Return(expr) => {
                let _ = writeln!(out, "{pad}return {expr}");
            }
        }
    }
}

/// Replaces the identifier `old` by `new` everywhere in a body.
pub fn rename_in(body: &mut [Stmt], old: &str, new: &str) {
    let re = regex::Regex::new(&format!(r"\b{}\b", regex::escape(old))).expect("escaped identifier");
    let sub = |s: &mut String| *s = re.replace_all(s, new).into_owned();
    for stmt in body {
        match stmt {
            Stmt::Guard { cond, .. } => sub(&mut cond.left),
            Stmt::Assign { target, expr, .. } => {
                sub(target);
                sub(expr);
            }
            Stmt::Expr(e) | Stmt::Return(e) => sub(e),
            Stmt::If { cond, body } => {
                sub(&mut cond.left);
                rename_in(body, old, new);
            }
            Stmt::For { target, iter, body } => {
                sub(target);
                sub(iter);
                rename_in(body, old, new);
            }
        }
    }
}
