//! Python's `json.dumps`, byte for byte, for the template's `tojson` filter.
//!
//! transformers replaces Jinja's `tojson` with
//! `json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)`,
//! so `{"a": 1, "b": [1.0, "é"]}` keeps `", "` / `": "` separators, key order,
//! non-ASCII text and `<>&'` unescaped, and floats print as Python's `repr`.

use serde_json::Value;

/// Options of `json.dumps` that the filter exposes.
#[derive(Debug, Clone)]
pub struct DumpOptions {
    /// Escape every non-ASCII character as `\uXXXX`.
    pub ensure_ascii: bool,
    /// Pretty-print with this indent string (Python's `indent`; ints become spaces).
    pub indent: Option<String>,
    /// Separator between items (Python default: `", "`, or `","` with an indent).
    pub item_sep: String,
    /// Separator between a key and its value (Python default: `": "`).
    pub key_sep: String,
    /// Sort object keys.
    pub sort_keys: bool,
}

impl Default for DumpOptions {
    fn default() -> Self {
        DumpOptions {
            ensure_ascii: false,
            indent: None,
            item_sep: ", ".into(),
            key_sep: ": ".into(),
            sort_keys: false,
        }
    }
}

/// Serializes `value` exactly as Python's `json.dumps` would with `opts`.
pub fn dumps(value: &Value, opts: &DumpOptions) -> String {
    let mut out = String::new();
    write_value(value, opts, 0, &mut out);
    out
}

fn write_value(value: &Value, opts: &DumpOptions, level: usize, out: &mut String) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => {
            if n.is_f64() {
                out.push_str(&float_repr(n.as_f64().unwrap_or(f64::NAN)));
            } else {
                out.push_str(&n.to_string());
            }
        }
        Value::String(s) => write_string(s, opts.ensure_ascii, out),
        Value::Array(items) => {
            if items.is_empty() {
                out.push_str("[]");
                return;
            }
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                separator(i, opts, level + 1, out);
                write_value(item, opts, level + 1, out);
            }
            closing(opts, level, out);
            out.push(']');
        }
        Value::Object(map) => {
            if map.is_empty() {
                out.push_str("{}");
                return;
            }
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            if opts.sort_keys {
                entries.sort_by(|a, b| a.0.cmp(b.0));
            }
            out.push('{');
            for (i, (key, item)) in entries.into_iter().enumerate() {
                separator(i, opts, level + 1, out);
                write_string(key, opts.ensure_ascii, out);
                out.push_str(&opts.key_sep);
                write_value(item, opts, level + 1, out);
            }
            closing(opts, level, out);
            out.push('}');
        }
    }
}

/// What goes before item `i` of a container whose items sit at `level`.
fn separator(i: usize, opts: &DumpOptions, level: usize, out: &mut String) {
    if i > 0 {
        out.push_str(&opts.item_sep);
    }
    if let Some(indent) = &opts.indent {
        out.push('\n');
        out.push_str(&indent.repeat(level));
    }
}

/// What goes before the closing bracket of a container at `level`.
fn closing(opts: &DumpOptions, level: usize, out: &mut String) {
    if let Some(indent) = &opts.indent {
        out.push('\n');
        out.push_str(&indent.repeat(level));
    }
}

/// A JSON string literal as Python writes it (lowercase `\u00XX` escapes).
fn write_string(s: &str, ensure_ascii: bool, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c if ensure_ascii && (c as u32) > 0x7e => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Python's `repr(float)`: shortest round-trip digits, positional notation for
/// decimal exponents in [-4, 16), else `d.ddde+XX`; `NaN`/`Infinity` as json.dumps.
pub fn float_repr(x: f64) -> String {
    if x.is_nan() {
        return "NaN".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    if x == 0.0 {
        return if x.is_sign_negative() { "-0.0" } else { "0.0" }.into();
    }
    // Rust's `{:e}` gives the shortest round-trip digits: "-1.2345e-7".
    let sci = format!("{x:e}");
    let (mantissa, exp) = sci.split_once('e').expect("`{:e}` always has an exponent");
    let exp: i32 = exp.parse().expect("`{:e}` exponent is an integer");
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    if (-4..16).contains(&exp) {
        let point = exp + 1; // digits before the decimal point
        let body = if point <= 0 {
            format!("0.{}{}", "0".repeat((-point) as usize), digits)
        } else if point as usize >= digits.len() {
            format!("{}{}.0", digits, "0".repeat(point as usize - digits.len()))
        } else {
            let (int, frac) = digits.split_at(point as usize);
            format!("{int}.{frac}")
        };
        format!("{sign}{body}")
    } else {
        let exp_sign = if exp < 0 { '-' } else { '+' };
        format!("{sign}{mantissa}e{exp_sign}{:02}", exp.abs())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn floats_match_python_repr() {
        let cases = [
            (1.0, "1.0"),
            (0.1, "0.1"),
            (-3.25, "-3.25"),
            (1e-7, "1e-07"),
            (1e20, "1e+20"),
            (1e16, "1e+16"),
            (1e15, "1000000000000000.0"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (123.456, "123.456"),
            (1.5e300, "1.5e+300"),
            (-0.0, "-0.0"),
        ];
        for (x, want) in cases {
            assert_eq!(float_repr(x), want, "{x}");
        }
    }

    #[test]
    fn default_dumps_matches_python() {
        let v = json!({"b": [1, 2.0, null, true], "a": "é<&>'\"\n\u{1}", "e": {}, "f": []});
        assert_eq!(
            dumps(&v, &DumpOptions::default()),
            r#"{"b": [1, 2.0, null, true], "a": "é<&>'\"\n\u0001", "e": {}, "f": []}"#
        );
    }

    #[test]
    fn indent_and_ascii_match_python() {
        let v = json!({"k": ["é", "😀"]});
        let opts = DumpOptions {
            ensure_ascii: true,
            indent: Some("  ".into()),
            item_sep: ",".into(),
            ..DumpOptions::default()
        };
        assert_eq!(
            dumps(&v, &opts),
            "{\n  \"k\": [\n    \"\\u00e9\",\n    \"\\ud83d\\ude00\"\n  ]\n}"
        );
    }
}
