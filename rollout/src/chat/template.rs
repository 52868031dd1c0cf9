//! The chat template engine: minijinja configured like transformers' Jinja2.
//!
//! transformers (`utils/chat_template_utils.py`) compiles chat templates in an
//! `ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
//! extensions=[loopcontrols])` with these additions, mirrored here:
//! - `tojson` filter = `json.dumps(x, ensure_ascii=False, indent=None,
//!   separators=None, sort_keys=False)` (see [`super::pyjson`]);
//! - `raise_exception(msg)` global, failing the render with `msg`;
//! - `strftime_now(fmt)` global, the current local time formatted by `fmt`;
//! - `dict(...)` and `namespace(...)` globals (minijinja built-ins).
//!
//! Python string methods the templates call (`.startswith`, `.split`,
//! `.lstrip`, ...) come from minijinja-contrib's pycompat callback.
//! Jinja2's defaults also hold: no autoescape, a single trailing newline of the
//! template is dropped, undefined values print as "" but fail on attribute access.

use std::path::Path;

use minijinja::value::Kwargs;
use minijinja::{AutoEscape, Environment, Error, ErrorKind, UndefinedBehavior, Value};

use super::error::{describe_template_error, ChatError, Result};
use super::pyjson::{self, DumpOptions};

/// Name under which the template is stored in its environment.
const TEMPLATE_NAME: &str = "chat_template";

/// A compiled chat template.
pub struct ChatTemplate {
    env: Environment<'static>,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate").finish_non_exhaustive()
    }
}

impl ChatTemplate {
    /// Compiles `source`; `origin` (the file it came from) only labels errors.
    pub fn new(source: String, origin: &Path) -> Result<Self> {
        let mut env = transformers_environment();
        env.add_template_owned(TEMPLATE_NAME, source)
            .map_err(|e| ChatError::TemplateCompile {
                path: origin.to_path_buf(),
                message: describe_template_error(&e),
            })?;
        Ok(ChatTemplate { env })
    }

    /// Renders the template with `context` (a map of template variables).
    pub fn render(&self, context: Value) -> Result<String> {
        let template = self
            .env
            .get_template(TEMPLATE_NAME)
            .map_err(|e| ChatError::render(&e))?;
        template.render(context).map_err(|e| ChatError::render(&e))
    }
}

/// A minijinja environment set up as transformers sets up Jinja2.
fn transformers_environment() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_trim_blocks(true);
    env.set_lstrip_blocks(true);
    env.set_keep_trailing_newline(false);
    env.set_auto_escape_callback(|_| AutoEscape::None);
    env.set_undefined_behavior(UndefinedBehavior::Lenient);
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.add_filter("tojson", tojson);
    env.add_function("raise_exception", raise_exception);
    env.add_function("strftime_now", strftime_now);
    env
}

/// `tojson` as transformers defines it: Python's `json.dumps` with
/// `ensure_ascii`, `indent`, `separators` and `sort_keys` keyword arguments.
fn tojson(value: &Value, kwargs: Kwargs) -> std::result::Result<Value, Error> {
    let mut opts = DumpOptions {
        ensure_ascii: kwargs.get::<Option<bool>>("ensure_ascii")?.unwrap_or(false),
        sort_keys: kwargs.get::<Option<bool>>("sort_keys")?.unwrap_or(false),
        ..DumpOptions::default()
    };
    if let Some(indent) = kwargs.get::<Option<Value>>("indent")? {
        opts.indent = Some(python_indent(&indent)?);
        opts.item_sep = ",".into();
    }
    if let Some(seps) = kwargs.get::<Option<Vec<String>>>("separators")? {
        let [item, key]: [String; 2] = seps.try_into().map_err(|_| {
            Error::new(
                ErrorKind::InvalidOperation,
                "tojson: separators must be (item, key)",
            )
        })?;
        opts.item_sep = item;
        opts.key_sep = key;
    }
    kwargs.assert_all_used()?;
    let json = serde_json::to_value(value)
        .map_err(|e| Error::new(ErrorKind::BadSerialization, e.to_string()))?;
    Ok(Value::from_safe_string(pyjson::dumps(&json, &opts)))
}

/// Python's `indent` argument: an int means that many spaces, a string itself.
fn python_indent(indent: &Value) -> std::result::Result<String, Error> {
    if let Some(s) = indent.as_str() {
        return Ok(s.to_string());
    }
    let n = i64::try_from(indent.clone()).map_err(|_| {
        Error::new(
            ErrorKind::InvalidOperation,
            "tojson: indent must be an int or a string",
        )
    })?;
    Ok(" ".repeat(n.max(0) as usize))
}

/// `raise_exception(message)`: fails the render with the template's message.
fn raise_exception(message: String) -> std::result::Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, message))
}

/// `strftime_now(format)`: the current time (UTC) formatted like Python's `strftime`.
fn strftime_now(format: String) -> std::result::Result<Value, Error> {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    Ok(Value::from(strftime(&format, secs)))
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const WEEKDAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];

/// Formats `unix_secs` (UTC) with the common `strftime` directives
/// (`%Y %y %m %d %e %j %H %I %M %S %p %A %a %B %b %h %F %T %D %%`); others are
/// kept verbatim.
pub(crate) fn strftime(format: &str, unix_secs: i64) -> String {
    let days = unix_secs.div_euclid(86_400);
    let secs_of_day = unix_secs.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    let (hour, minute, second) = (secs_of_day / 3600, secs_of_day / 60 % 60, secs_of_day % 60);
    let weekday = (days + 3).rem_euclid(7) as usize; // 1970-01-01 was a Thursday
    let yday = days - days_from_civil(year, 1, 1) + 1;
    let hour12 = if hour % 12 == 0 { 12 } else { hour % 12 };
    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let Some(d) = chars.next() else {
            out.push('%');
            break;
        };
        let piece = match d {
            'Y' => year.to_string(),
            'y' => format!("{:02}", year.rem_euclid(100)),
            'm' => format!("{month:02}"),
            'd' => format!("{day:02}"),
            'e' => format!("{day:>2}"),
            'j' => format!("{yday:03}"),
            'H' => format!("{hour:02}"),
            'I' => format!("{hour12:02}"),
            'M' => format!("{minute:02}"),
            'S' => format!("{second:02}"),
            'p' => (if hour < 12 { "AM" } else { "PM" }).to_string(),
            'A' => WEEKDAYS[weekday].to_string(),
            'a' => WEEKDAYS[weekday][..3].to_string(),
            'B' => MONTHS[month as usize - 1].to_string(),
            'b' | 'h' => MONTHS[month as usize - 1][..3].to_string(),
            'F' => format!("{year}-{month:02}-{day:02}"),
            'T' => format!("{hour:02}:{minute:02}:{second:02}"),
            'D' => format!("{month:02}/{day:02}/{:02}", year.rem_euclid(100)),
            '%' => "%".to_string(),
            other => format!("%{other}"),
        };
        out.push_str(&piece);
    }
    out
}

/// (year, month, day) of a day count since 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Day count since 1970-01-01 of a civil date (inverse of [`civil_from_days`]).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = if month > 2 { month - 3 } else { month + 9 };
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strftime_formats_known_dates() {
        // 2024-02-29 13:05:09 UTC, a Thursday.
        let t = 1_709_211_909;
        assert_eq!(strftime("%Y-%m-%d %H:%M:%S", t), "2024-02-29 13:05:09");
        assert_eq!(
            strftime("%d %b %Y, %A %I%p %j %%", t),
            "29 Feb 2024, Thursday 01PM 060 %"
        );
        assert_eq!(strftime("%F", 0), "1970-01-01");
    }

    #[test]
    fn environment_behaves_like_transformers() {
        let tpl = ChatTemplate::new(
            concat!(
                "{%- if x is defined %}bad{% endif %}\n",
                "{{ d | tojson }}|{{ 'a,b'.split(',')[-1] }}|{{ '  s'.lstrip() }}|{{ l[::-1] }}\n"
            )
            .to_string(),
            Path::new("inline"),
        )
        .unwrap();
        let ctx = Value::from_serialize(serde_json::json!({
            "d": {"z": 1, "a": "<é>"}, "l": [1, 2, 3]
        }));
        assert_eq!(
            tpl.render(ctx).unwrap(),
            "{\"z\": 1, \"a\": \"<é>\"}|b|s|[3, 2, 1]"
        );
        let err = ChatTemplate::new("{{ raise_exception('nope') }}".into(), Path::new("t"))
            .unwrap()
            .render(Value::from(()))
            .unwrap_err();
        assert!(err.to_string().contains("nope"), "{err}");
    }
}
