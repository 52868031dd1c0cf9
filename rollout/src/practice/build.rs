//! The first commit's code: modules drawn from the domain vocabulary, each
//! with constants, one class (constructor, `add_<item>`, `<amount>_due` and
//! two of `is_<state>` / `<action>` / `<charge>`) and module-level helpers
//! (`validate_`, `apply_<amount>_discount`, `format_`, `parse_`, `_in_cents`).

use std::collections::BTreeMap;

use rand::seq::{IndexedRandom, SliceRandom};
use rand::Rng;
use rand_chacha::ChaCha8Rng;

use super::code::{AssignOp, Class, CmpOp, Cond, Function, Message, Module, Operand, Param, ParamKind, Stmt, STYLES};
use super::vocab::{article, snake, upper, Domain, DOMAINS};

/// The generated package: its modules plus files that never change.
#[derive(Clone, Debug)]
pub struct Codebase {
    /// The top-level Python package (`shop`).
    pub root: String,
    /// Modules with code, in path order.
    pub modules: Vec<Module>,
    /// Release number written into `<root>/__init__.py`.
    pub release: u32,
    /// Files written once with the first commit (README, package `__init__`s, tests).
    pub fixed: BTreeMap<String, String>,
}

impl Codebase {
    /// Every file of the repository: path -> contents.
    pub fn files(&self) -> BTreeMap<String, String> {
        let mut files = self.fixed.clone();
        let root = &self.root;
        files.insert(
            format!("{root}/__init__.py"),
            format!("\"\"\"The {root} package: billing, inventory, shipping and customer tools.\"\"\"\n\n__version__ = \"0.1.{}\"\n", self.release),
        );
        for module in &self.modules {
            files.insert(module.path.clone(), module.render());
        }
        files
    }
}

/// The files that never change, from the first commit's modules.
fn fixed_files(code: &Codebase) -> BTreeMap<String, String> {
    let mut files = BTreeMap::new();
    files.insert("README.md".into(), readme(code));
    for module in &code.modules {
        let package = module.path.rsplit_once('/').map_or("", |(dir, _)| dir);
        let short = package.rsplit('/').next().unwrap_or(package);
        files.entry(format!("{package}/__init__.py")).or_insert_with(|| format!("\"\"\"{} helpers.\"\"\"\n", capitalize(short)));
        files.insert(test_path(module), render_tests(module));
    }
    files
}

fn readme(code: &Codebase) -> String {
    let mut text = format!("# {}\n\nA small commerce toolkit. Modules:\n\n", code.root);
    for m in &code.modules {
        text.push_str(&format!("- `{}`: {}\n", m.path, m.doc));
    }
    text
}

fn test_path(module: &Module) -> String {
    let stem = module.path.rsplit('/').next().unwrap_or(&module.path).trim_end_matches(".py");
    format!("tests/test_{stem}.py")
}

/// A pytest file checking the error messages of the module-level functions
/// (written once, like tests that lag behind the code).
fn render_tests(module: &Module) -> String {
    let import = module.path.trim_end_matches(".py").replace('/', ".");
    let mut names: Vec<&str> = module.classes.iter().map(|c| c.name.as_str()).collect();
    names.extend(module.functions.iter().map(|f| f.name.as_str()));
    let mut out = format!("import pytest\n\nfrom {import} import {}\n", names.join(", "));
    for class in &module.classes {
        let snake_name = class.methods.first().and_then(|m| m.params.first()).map_or("item", |p| p.name.as_str());
        out.push_str(&format!(
            "\n\ndef test_new_{snake_name}_is_open():\n    assert {}(\"X-1\").status == \"open\"\n",
            class.name
        ));
    }
    for f in &module.functions {
        for stmt in &f.body {
            if let Stmt::Guard { cond, exc, message } = stmt {
                let Some(p) = f.params.iter().find(|p| cond.left == p.name) else { continue };
                let bad = match (cond.op, &cond.right) {
                    (CmpOp::Lt | CmpOp::Le, _) => "-1".to_string(),
                    (CmpOp::Gt | CmpOp::Ge, Operand::Num(n)) => super::code::fmt_num(n + 1.0),
                    _ => "None".to_string(),
                };
                let args: Vec<String> = f.params.iter().filter(|q| q.default.is_none() || q.name == p.name).map(|q| if q.name == p.name { bad.clone() } else { "1".into() }).collect();
                let text = super::code::message_text(cond, message);
                out.push_str(&format!(
                    "\n\ndef test_{}_rejects_bad_{}():\n    with pytest.raises({exc}, match=\"{text}\"):\n        {}({})\n",
                    f.name,
                    p.name,
                    f.name,
                    args.join(", ")
                ));
            }
        }
    }
    out
}

/// Draws the modules: 3 packages, 2-3 modules each.
pub fn build(root: &str, rng: &mut ChaCha8Rng) -> Codebase {
    let mut packages: Vec<&str> = DOMAINS.iter().map(|d| d.package).collect();
    packages.dedup();
    packages.shuffle(rng);
    let mut modules = Vec::new();
    for package in packages.iter().take(3) {
        let mut domains: Vec<&Domain> = DOMAINS.iter().filter(|d| d.package == *package).collect();
        domains.shuffle(rng);
        let count = rng.random_range(2..=domains.len().min(3));
        for domain in domains.into_iter().take(count) {
            modules.push(build_module(root, domain, rng));
        }
    }
    modules.sort_by(|a, b| a.path.cmp(&b.path));
    let mut code = Codebase { root: root.to_string(), modules, release: 0, fixed: BTreeMap::new() };
    code.fixed = fixed_files(&code);
    code
}

fn derived(label: impl Into<String>, rng: &mut ChaCha8Rng) -> Message {
    Message::Derived { label: label.into(), style: rng.random_range(0..STYLES) }
}

fn guard(left: &str, op: CmpOp, right: Operand, exc: &'static str, message: Message) -> Stmt {
    Stmt::Guard { cond: Cond::new(left, op, right), exc, message }
}

fn assign(target: &str, op: AssignOp, expr: impl Into<String>) -> Stmt {
    Stmt::Assign { target: target.into(), op, expr: expr.into() }
}

fn param(name: &str, default: Option<Operand>, kind: ParamKind, label: impl Into<String>) -> Param {
    Param { name: name.into(), default, kind, label: label.into() }
}

/// A round limit such as 500 or 20000.
fn limit(rng: &mut ChaCha8Rng) -> f64 {
    *[50.0, 100.0, 250.0, 500.0, 1000.0, 5000.0, 10000.0, 20000.0].choose(rng).expect("non-empty")
}

fn build_module(root: &str, d: &Domain, rng: &mut ChaCha8Rng) -> Module {
    let max_items = rng.random_range(2..=10) * 10;
    let constants = vec![
        (format!("MAX_{}S", upper(d.item)), max_items.to_string()),
        ("BULK_REBATE".into(), format!("0.0{}", rng.random_range(2..=8))),
        ("BASE_FEE".into(), format!("{}.{}", rng.random_range(2..=9), rng.random_range(0..=9) * 10 / 2)),
        ("DAILY_RATE".into(), format!("0.{}", rng.random_range(1..=9) * 5)),
    ];
    let mut methods = vec![init_method(d), add_item(d, max_items, rng), amount_due(d, rng)];
    let mut extras = vec![is_state(d, rng), action(d, rng), charge(d, rng)];
    extras.shuffle(rng);
    methods.extend(extras.into_iter().take(2));
    let class = Class {
        name: d.class.to_string(),
        doc: format!("{} {} and its {}s.", capitalize(article(d.noun)), d.noun, d.item),
        methods,
    };
    let mut helpers = vec![
        validate(d, 0, rng),
        validate(d, 1, rng),
        apply_discount(d, rng),
        format_amount(d, rng.random_range(0..2), rng),
        parse_amount(d, rng.random_range(0..2), rng),
        in_cents(d, rng),
    ];
    helpers.shuffle(rng);
    let take = rng.random_range(2..=3);
    let mut functions: Vec<Function> = Vec::new();
    for f in helpers {
        if functions.len() < take && !functions.iter().any(|g| g.name == f.name) {
            functions.push(f);
        }
    }
    Module {
        path: format!("{root}/{}/{}.py", d.package, d.module),
        doc: format!("{} {}s: {} and {}.", capitalize(d.package), d.module, d.amounts[0].1, d.amounts[1].1),
        constants,
        classes: vec![class],
        functions,
    }
}

fn capitalize(s: &str) -> String {
    let mut c = s.chars();
    c.next().map(|f| f.to_uppercase().collect::<String>() + c.as_str()).unwrap_or_default()
}

fn init_method(d: &Domain) -> Function {
    let id = format!("{}_id", snake(d.noun));
    Function {
        name: "__init__".into(),
        params: vec![
            param(&id, None, ParamKind::Object, format!("{} id", d.noun)),
            param("created_day", Some(Operand::Num(0.0)), ParamKind::Number, "creation day"),
        ],
        doc: format!("Create an empty {} opened on `created_day`.", d.noun),
        phrase: format!("creating {} {}", article(d.noun), d.noun),
        body: vec![
            assign(&format!("self.{id}"), AssignOp::Set, id.clone()),
            assign("self.created_day", AssignOp::Set, "created_day"),
            assign(&format!("self.{}s", d.item), AssignOp::Set, "[]"),
            assign("self.status", AssignOp::Set, "\"open\""),
        ],
    }
}

fn add_item(d: &Domain, max_items: u32, rng: &mut ChaCha8Rng) -> Function {
    let items = format!("self.{}s", d.item);
    Function {
        name: format!("add_{}", d.item),
        params: vec![
            param(d.item, None, ParamKind::Object, d.item),
            param("quantity", Some(Operand::Num(1.0)), ParamKind::Number, format!("{} quantity", d.item)),
        ],
        doc: format!("Add `quantity` of {} {} and return the number of {}s.", article(d.item), d.item, d.item),
        phrase: format!("adding {} {} to {} {}", article(d.item), d.item, article(d.noun), d.noun),
        body: vec![
            guard("quantity", CmpOp::Le, Operand::Num(0.0), "ValueError", derived(format!("{} quantity", d.item), rng)),
            guard(
                &format!("len({items})"),
                CmpOp::Ge,
                Operand::Code(format!("MAX_{}S", upper(d.item))),
                "ValueError",
                Message::Fixed(format!("{} cannot hold more than {max_items} {}s", d.noun, d.item)),
            ),
            Stmt::Expr(format!("{items}.append(({}, quantity))", d.item)),
            Stmt::Return(format!("len({items})")),
        ],
    }
}

fn amount_due(d: &Domain, rng: &mut ChaCha8Rng) -> Function {
    let (amount, label) = d.amounts[0];
    Function {
        name: format!("{amount}_due"),
        params: vec![],
        doc: format!("Sum the {}s, minus the bulk rebate above the threshold.", d.item),
        phrase: format!("computing the {label} due"),
        body: vec![
            assign("subtotal", AssignOp::Set, "0"),
            Stmt::For {
                target: format!("{}, quantity", d.item),
                iter: format!("self.{}s", d.item),
                body: vec![assign("subtotal", AssignOp::Add, format!("{}.price * quantity", d.item))],
            },
            Stmt::If {
                cond: Cond::new("subtotal", CmpOp::Gt, Operand::Num(limit(rng))),
                body: vec![assign("subtotal", AssignOp::Sub, "subtotal * BULK_REBATE")],
            },
            Stmt::Return("round(subtotal, 2)".into()),
        ],
    }
}

fn is_state(d: &Domain, rng: &mut ChaCha8Rng) -> Function {
    let days = f64::from(rng.random_range(2..=12) * 5);
    Function {
        name: format!("is_{}", d.state),
        params: vec![param("today", None, ParamKind::Number, "current day")],
        doc: format!("Whether the {} counts as {} on `today`.", d.noun, d.state),
        phrase: format!("checking whether {} {} is {}", article(d.noun), d.noun, d.state),
        body: vec![
            assign("age", AssignOp::Set, "today - self.created_day"),
            guard("age", CmpOp::Lt, Operand::Num(0.0), "ValueError", Message::Fixed(format!("today is before the {} was created", d.noun))),
            Stmt::If { cond: Cond::new("age", CmpOp::Gt, Operand::Num(days)), body: vec![Stmt::Return("True".into())] },
            Stmt::Return("False".into()),
        ],
    }
}

fn action(d: &Domain, rng: &mut ChaCha8Rng) -> Function {
    let (verb, past) = d.action;
    let min_len = f64::from(rng.random_range(3..=10));
    Function {
        name: verb.to_string(),
        params: vec![param("reason", None, ParamKind::Object, format!("{verb} reason"))],
        doc: format!("Mark the {} as {past}, recording why.", d.noun),
        phrase: format!("marking {} {} as {past}", article(d.noun), d.noun),
        body: vec![
            guard(
                "self.status",
                CmpOp::Eq,
                Operand::Code(format!("\"{past}\"")),
                "RuntimeError",
                Message::Fixed(format!("{} is already {past}", d.noun)),
            ),
            guard("len(reason)", CmpOp::Lt, Operand::Num(min_len), "ValueError", Message::Fixed(format!("a {verb} reason needs at least {} characters", min_len))),
            assign("self.status", AssignOp::Set, format!("\"{past}\"")),
            assign("self.reason", AssignOp::Set, "reason"),
            Stmt::Return("True".into()),
        ],
    }
}

fn charge(d: &Domain, rng: &mut ChaCha8Rng) -> Function {
    let (name, arg, words) = d.charge;
    let free = f64::from(rng.random_range(1..=6) * 5);
    Function {
        name: name.to_string(),
        params: vec![param(arg, None, ParamKind::Number, words)],
        doc: format!("The {} for `{arg}`: a base fee plus a daily rate past the free allowance.", name.replace('_', " ")),
        phrase: format!("computing the {} of {} {}", name.replace('_', " "), article(d.noun), d.noun),
        body: vec![
            guard(arg, CmpOp::Lt, Operand::Num(0.0), "ValueError", derived(words, rng)),
            assign("charge", AssignOp::Set, "BASE_FEE"),
            Stmt::If {
                cond: Cond::new(arg, CmpOp::Gt, Operand::Num(free)),
                body: vec![assign("charge", AssignOp::Add, format!("({arg} - {}) * DAILY_RATE", super::code::fmt_num(free)))],
            },
            Stmt::Return("round(charge, 2)".into()),
        ],
    }
}

fn validate(d: &Domain, which: usize, rng: &mut ChaCha8Rng) -> Function {
    let (amount, label) = d.amounts[which];
    let mut body = Vec::new();
    if rng.random_bool(0.5) {
        body.push(guard("value", CmpOp::Is, Operand::Code("None".into()), "TypeError", derived(label, rng)));
    }
    body.push(guard("value", CmpOp::Lt, Operand::Num(0.0), "ValueError", derived(label, rng)));
    body.push(guard("value", CmpOp::Gt, Operand::Num(limit(rng)), "ValueError", derived(label, rng)));
    body.push(Stmt::Return("value".into()));
    Function {
        name: format!("validate_{amount}"),
        params: vec![param("value", None, ParamKind::Number, label)],
        doc: format!("Check that {} {label} is within the accepted range and return it.", article(label)),
        phrase: format!("validating {} {label}", article(label)),
        body,
    }
}

fn apply_discount(d: &Domain, rng: &mut ChaCha8Rng) -> Function {
    let (amount, label) = d.amounts[0];
    let rate = f64::from(rng.random_range(1..=4) * 5) / 100.0;
    Function {
        name: format!("apply_{amount}_discount"),
        params: vec![
            param(amount, None, ParamKind::Number, label),
            param("rate", Some(Operand::Num(rate)), ParamKind::Number, "discount rate"),
        ],
        doc: format!("Return the {label} reduced by a fractional discount rate."),
        phrase: format!("discounting {} {label}", article(label)),
        body: vec![
            guard("rate", CmpOp::Lt, Operand::Num(0.0), "ValueError", derived("discount rate", rng)),
            guard("rate", CmpOp::Gt, Operand::Num(1.0), "ValueError", derived("discount rate", rng)),
            assign("reduced", AssignOp::Set, format!("{amount} * (1 - rate)")),
            Stmt::Return("round(reduced, 2)".into()),
        ],
    }
}

fn format_amount(d: &Domain, which: usize, rng: &mut ChaCha8Rng) -> Function {
    let (amount, label) = d.amounts[which];
    Function {
        name: format!("format_{amount}"),
        params: vec![
            param("value", None, ParamKind::Number, label),
            param("unit", Some(Operand::Code("\"EUR\"".into())), ParamKind::Object, "unit"),
        ],
        doc: format!("Render {} {label} for receipts and reports.", article(label)),
        phrase: format!("formatting {} {label} for display", article(label)),
        body: vec![
            guard("value", CmpOp::Is, Operand::Code("None".into()), "TypeError", derived(label, rng)),
            assign("text", AssignOp::Set, "f\"{value:.2f} {unit}\""),
            Stmt::Return("text.strip()".into()),
        ],
    }
}

fn parse_amount(d: &Domain, which: usize, rng: &mut ChaCha8Rng) -> Function {
    let (amount, label) = d.amounts[which];
    Function {
        name: format!("parse_{amount}"),
        params: vec![param("raw", None, ParamKind::Object, format!("{label} text"))],
        doc: format!("Parse {} {label} typed by a user, such as ' 12.50 '.", article(label)),
        phrase: format!("reading {} {label} typed by a user", article(label)),
        body: vec![
            assign("cleaned", AssignOp::Set, "raw.strip()"),
            guard("len(cleaned)", CmpOp::Eq, Operand::Num(0.0), "ValueError", Message::Fixed(format!("empty {label} text"))),
            assign("value", AssignOp::Set, "float(cleaned)"),
            guard("value", CmpOp::Lt, Operand::Num(0.0), "ValueError", derived(label, rng)),
            Stmt::Return("value".into()),
        ],
    }
}

fn in_cents(d: &Domain, rng: &mut ChaCha8Rng) -> Function {
    let (amount, label) = d.amounts[0];
    Function {
        name: format!("{amount}_in_cents"),
        params: vec![param(amount, None, ParamKind::Number, label)],
        doc: format!("Convert {} {label} to whole cents.", article(label)),
        phrase: format!("converting {} {label} to cents", article(label)),
        body: vec![
            assign("cents", AssignOp::Set, format!("int(round({amount} * 100))")),
            guard("cents", CmpOp::Gt, Operand::Num(limit(rng) * 100.0), "ValueError", derived(format!("{label} in cents"), rng)),
            Stmt::Return("cents".into()),
        ],
    }
}
