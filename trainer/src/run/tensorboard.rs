//! TensorBoard event files of a run's metrics: every scalar of each
//! metrics.jsonl line (numbers and booleans, nested keys joined with `/`;
//! nulls left out) as one `Event` of its step, written by hand: TFRecord
//! records (length, masked CRC-32C of the length, data, masked CRC-32C of
//! the data), each an `Event` protobuf (`wall_time`, `step`, and a
//! `Summary` of `{tag, simple_value}` values, or the first record's
//! `file_version: "brain.Event:2"`).
//!
//! Resume: each process start writes a new file (its name sorts after the
//! folder's earlier ones), beginning with a `SessionLog START` event at the
//! first step it logs, and first cuts the earlier files of this writer back
//! to the steps the run keeps (as metrics.jsonl is cut): no step is in two
//! files, and a TensorBoard reading the folder live drops the redone steps
//! it had read (its purge at a START event).

use std::io::Write;
use std::path::{Path, PathBuf};

/// The `file_version` of the first event of each file.
pub const FILE_VERSION: &str = "brain.Event:2";

/// What this writer's file names start and end with
/// (`events.out.tfevents.<unix seconds>.<host>.<pid>.fusegrpo`).
const PREFIX: &str = "events.out.tfevents.";
const SUFFIX: &str = ".fusegrpo";

pub use crate::error::EventFileError;

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> EventFileError + '_ {
    move |source| EventFileError::Io { path: path.to_path_buf(), source }
}

/// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), one byte per table lookup.
pub fn crc32c(data: &[u8]) -> u32 {
    const TABLE: [u32; 256] = {
        let mut table = [0u32; 256];
        let mut i = 0;
        while i < 256 {
            let mut c = i as u32;
            let mut k = 0;
            while k < 8 {
                c = if c & 1 != 0 { (c >> 1) ^ 0x82F6_3B78 } else { c >> 1 };
                k += 1;
            }
            table[i] = c;
            i += 1;
        }
        table
    };
    !data.iter().fold(!0u32, |c, &b| TABLE[((c ^ b as u32) & 0xff) as usize] ^ (c >> 8))
}

/// The masked CRC-32C of TFRecord framing.
pub fn masked_crc32c(data: &[u8]) -> u32 {
    let c = crc32c(data);
    c.rotate_right(15).wrapping_add(0xA282_EAD8)
}

/// `data` framed as one TFRecord record.
pub fn record(data: &[u8]) -> Vec<u8> {
    let len = (data.len() as u64).to_le_bytes();
    let mut out = Vec::with_capacity(data.len() + 16);
    out.extend_from_slice(&len);
    out.extend_from_slice(&masked_crc32c(&len).to_le_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(&masked_crc32c(data).to_le_bytes());
    out
}

/// The records of `bytes`, each checked against its CRCs; the error names
/// the byte offset of the first bad or incomplete record, and `Ok` holds
/// the records before it too (`(records, Some(error))`).
pub fn records(bytes: &[u8]) -> (Vec<&[u8]>, Option<EventFileError>) {
    let mut out = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let bad = |message: String| Some(EventFileError::Corrupt { offset: at, message });
        let Some(header) = bytes.get(at..at + 12) else { return (out, bad("an incomplete record header".into())) };
        let (len, len_crc) = header.split_at(8);
        if masked_crc32c(len) != u32::from_le_bytes(len_crc.try_into().expect("4 bytes")) {
            return (out, bad("the length's CRC does not match".into()));
        }
        let n = u64::from_le_bytes(len.try_into().expect("8 bytes")) as usize;
        let Some(data) = bytes.get(at + 12..(at + 12).saturating_add(n)) else { return (out, bad(format!("an incomplete record of {n} bytes"))) };
        let Some(crc) = bytes.get(at + 12 + n..at + 16 + n) else { return (out, bad("a record without its data CRC".into())) };
        if masked_crc32c(data) != u32::from_le_bytes(crc.try_into().expect("4 bytes")) {
            return (out, bad("the data's CRC does not match".into()));
        }
        out.push(data);
        at += 16 + n;
    }
    (out, None)
}

/// The part of an `Event` this writer writes and reads back.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub wall_time: f64,
    pub step: i64,
    pub what: What,
}

/// What an [`Event`] holds.
#[derive(Debug, Clone, PartialEq)]
pub enum What {
    /// The first event of a file (`file_version`).
    FileVersion(String),
    /// A `Summary` of `{tag, simple_value}` values.
    Scalars(Vec<(String, f32)>),
    /// `SessionLog { status: START }`: a (re)start at this step; readers
    /// drop the events of earlier files at this step and after.
    Start,
    /// Anything else (read, not written).
    Other,
}

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A length-delimited field.
fn bytes_field(out: &mut Vec<u8>, field: u32, data: &[u8]) {
    varint(out, (field as u64) << 3 | 2);
    varint(out, data.len() as u64);
    out.extend_from_slice(data);
}

impl Event {
    /// The protobuf encoding (fields in number order, as protobuf writes them).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![(1 << 3) | 1];
        out.extend_from_slice(&self.wall_time.to_le_bytes());
        if self.step != 0 {
            varint(&mut out, 2 << 3);
            varint(&mut out, self.step as u64);
        }
        match &self.what {
            What::FileVersion(v) => bytes_field(&mut out, 3, v.as_bytes()),
            What::Scalars(values) => {
                let mut summary = Vec::new();
                for (tag, v) in values {
                    let mut value = Vec::new();
                    bytes_field(&mut value, 1, tag.as_bytes());
                    value.push((2 << 3) | 5);
                    value.extend_from_slice(&v.to_le_bytes());
                    bytes_field(&mut summary, 1, &value);
                }
                bytes_field(&mut out, 5, &summary);
            }
            What::Start => bytes_field(&mut out, 7, &[1 << 3, 1]),
            What::Other => {}
        }
        out
    }

    /// Decodes what [`Event::encode`] writes; other fields are skipped.
    pub fn decode(data: &[u8]) -> Result<Event, EventFileError> {
        let mut event = Event { wall_time: 0.0, step: 0, what: What::Other };
        for (field, value) in fields(data)? {
            match (field, value) {
                (1, Field::Fixed64(v)) => event.wall_time = f64::from_bits(v),
                (2, Field::Varint(v)) => event.step = v as i64,
                (3, Field::Bytes(b)) => event.what = What::FileVersion(String::from_utf8_lossy(b).into_owned()),
                (5, Field::Bytes(b)) => event.what = What::Scalars(summary(b)?),
                (7, Field::Bytes(b))
                    if fields(b)?.iter().any(|f| matches!(f, (1, Field::Varint(1)))) => {
                        event.what = What::Start;
                    }
                _ => {}
            }
        }
        Ok(event)
    }
}

/// A protobuf field's value.
enum Field<'a> {
    Varint(u64),
    Fixed64(u64),
    Bytes(&'a [u8]),
    Fixed32(u32),
}

/// The fields of one protobuf message.
fn fields(data: &[u8]) -> Result<Vec<(u64, Field<'_>)>, EventFileError> {
    let mut out = Vec::new();
    let mut at = 0;
    let corrupt = |at: usize, what: &str| EventFileError::Corrupt { offset: at, message: format!("an event's protobuf: {what}") };
    let read_varint = |at: &mut usize| -> Result<u64, EventFileError> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = *data.get(*at).ok_or_else(|| corrupt(*at, "a truncated varint"))?;
            *at += 1;
            v |= ((b & 0x7f) as u64) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(corrupt(*at, "a varint over 10 bytes"))
    };
    while at < data.len() {
        let key = read_varint(&mut at)?;
        let fixed = |at: &mut usize, n: usize| -> Result<&[u8], EventFileError> {
            let b = data.get(*at..*at + n).ok_or_else(|| corrupt(*at, "a truncated field"))?;
            *at += n;
            Ok(b)
        };
        let value = match key & 7 {
            0 => Field::Varint(read_varint(&mut at)?),
            1 => Field::Fixed64(u64::from_le_bytes(fixed(&mut at, 8)?.try_into().expect("8 bytes"))),
            2 => {
                let n = read_varint(&mut at)? as usize;
                Field::Bytes(fixed(&mut at, n)?)
            }
            5 => Field::Fixed32(u32::from_le_bytes(fixed(&mut at, 4)?.try_into().expect("4 bytes"))),
            w => return Err(corrupt(at, &format!("wire type {w}"))),
        };
        out.push((key >> 3, value));
    }
    Ok(out)
}

/// The `{tag, simple_value}` values of a `Summary` (others skipped).
fn summary(data: &[u8]) -> Result<Vec<(String, f32)>, EventFileError> {
    let mut out = Vec::new();
    for (field, value) in fields(data)? {
        let (1, Field::Bytes(value)) = (field, value) else { continue };
        let (mut tag, mut simple) = (None, None);
        for (f, v) in fields(value)? {
            match (f, v) {
                (1, Field::Bytes(b)) => tag = Some(String::from_utf8_lossy(b).into_owned()),
                (2, Field::Fixed32(v)) => simple = Some(f32::from_bits(v)),
                _ => {}
            }
        }
        if let (Some(tag), Some(v)) = (tag, simple) {
            out.push((tag, v));
        }
    }
    Ok(out)
}

/// The scalars of a metrics line: every number and boolean (1 or 0), at
/// any depth, tagged with its keys joined by `/` (`tasks/<id>`); `step` is
/// the event's step, not a scalar, and nulls (a metric not computed, or
/// not finite) have no value. `simple_value` is an f32.
pub fn scalars(row: &serde_json::Value) -> Vec<(String, f32)> {
    fn walk(prefix: &str, v: &serde_json::Value, out: &mut Vec<(String, f32)>) {
        match v {
            serde_json::Value::Number(n) => out.extend(n.as_f64().map(|x| (prefix.to_string(), x as f32))),
            serde_json::Value::Bool(b) => out.push((prefix.to_string(), if *b { 1.0 } else { 0.0 })),
            serde_json::Value::Object(m) => {
                for (k, v) in m {
                    let tag = if prefix.is_empty() { k.clone() } else { format!("{prefix}/{k}") };
                    if !(prefix.is_empty() && k == "step") {
                        walk(&tag, v, out);
                    }
                }
            }
            serde_json::Value::Array(a) => {
                for (i, v) in a.iter().enumerate() {
                    walk(&format!("{prefix}/{i}"), v, out);
                }
            }
            serde_json::Value::Null | serde_json::Value::String(_) => {}
        }
    }
    let mut out = Vec::new();
    walk("", row, &mut out);
    out
}

/// The event files of `dir` this writer made, oldest first.
fn own_files(dir: &Path) -> Result<Vec<PathBuf>, EventFileError> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Ok(Vec::new()) };
    let mut out = Vec::new();
    for entry in entries {
        let path = entry.map_err(io(dir))?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if name.starts_with(PREFIX) && name.ends_with(SUFFIX) {
            out.push(path);
        }
    }
    out.sort();
    Ok(out)
}

/// Cuts `path` back to its events of steps `..=start` (a file left without
/// scalars is removed; a corrupt tail goes, with a note).
fn cut(path: &Path, start: u64) -> Result<(), EventFileError> {
    let bytes = std::fs::read(path).map_err(io(path))?;
    let (all, err) = records(&bytes);
    if let Some(e) = &err {
        crate::progress::say(&format!("note: {}: {e}; the records after it are dropped", path.display()));
    }
    let mut kept = Vec::new();
    let mut any_scalars = false;
    for data in &all {
        let event = Event::decode(data).map_err(|e| EventFileError::Corrupt { offset: 0, message: format!("{}: {e}", path.display()) })?;
        if event.step <= start as i64 {
            any_scalars |= matches!(event.what, What::Scalars(_));
            kept.push(*data);
        }
    }
    if !any_scalars {
        return std::fs::remove_file(path).map_err(io(path));
    }
    if kept.len() == all.len() && err.is_none() {
        return Ok(());
    }
    // Through a temporary name TensorBoard does not take for an event file.
    let out: Vec<u8> = kept.iter().flat_map(|d| record(d)).collect();
    let tmp = path.with_file_name(format!(".cut-{}.partial", std::process::id()));
    std::fs::write(&tmp, &out).map_err(io(&tmp))?;
    std::fs::rename(&tmp, path).map_err(io(path))
}

fn now() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

/// A run's event file, open for appending the scalars of its steps.
pub struct EventWriter {
    file: std::fs::File,
    path: PathBuf,
}

impl EventWriter {
    /// A new event file in `dir` (made if missing) for the steps after
    /// `start`, once the folder's earlier files of this writer are cut back
    /// to steps `..=start`; it opens with `file_version` and a START event
    /// at step `start + 1`.
    pub fn create(dir: &Path, start: u64) -> Result<EventWriter, EventFileError> {
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        let earlier = own_files(dir)?;
        for path in &earlier {
            cut(path, start)?;
        }
        // A name that sorts after every earlier file (TensorBoard reads them in name order).
        let newest = earlier.iter().filter_map(|p| p.file_name()?.to_str()?.strip_prefix(PREFIX)?.split('.').next()?.parse::<u64>().ok()).max();
        let secs = (now() as u64).max(newest.map_or(0, |n| n + 1));
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").map(|h| h.trim().replace(['/', '.'], "-")).unwrap_or_else(|_| "localhost".into());
        let path = dir.join(format!("{PREFIX}{secs:010}.{host}.{}{SUFFIX}", std::process::id()));
        let file = std::fs::OpenOptions::new().create_new(true).append(true).open(&path).map_err(io(&path))?;
        let mut writer = EventWriter { file, path };
        writer.event(Event { wall_time: now(), step: 0, what: What::FileVersion(FILE_VERSION.into()) })?;
        writer.event(Event { wall_time: now(), step: start as i64 + 1, what: What::Start })?;
        Ok(writer)
    }

    /// The file written.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends the scalars of `step` (one event; none when there are no scalars).
    pub fn write(&mut self, step: u64, scalars: Vec<(String, f32)>) -> Result<(), EventFileError> {
        if scalars.is_empty() {
            return Ok(());
        }
        self.event(Event { wall_time: now(), step: step as i64, what: What::Scalars(scalars) })
    }

    fn event(&mut self, event: Event) -> Result<(), EventFileError> {
        self.file.write_all(&record(&event.encode())).and_then(|_| self.file.flush()).map_err(io(&self.path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    #[test]
    fn crc32c_known_vectors() {
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        // RFC 3720 B.4: 32 bytes of zeros, of ones.
        assert_eq!(crc32c(&[0u8; 32]), 0x8A91_36AA);
        assert_eq!(crc32c(&[0xffu8; 32]), 0x62A8_AB43);
        assert_eq!(crc32c(b""), 0);
        // tensorboard's masked_crc32c (compat/tensorflow_stub/pywrap_tensorflow.py).
        assert_eq!(masked_crc32c(b"123456789"), 0xC78A_B0E5);
        assert_eq!(masked_crc32c(&[0u8; 8]), 0x0798_0329);
    }

    /// The bytes the `tensorboard` package's own protobuf classes give
    /// (`event_pb2.Event(...).SerializeToString().hex()`).
    #[test]
    fn events_encode_as_protobuf_does_and_decode_back() {
        let cases = [
            (Event { wall_time: 1.5, step: 3, what: What::Scalars(vec![("loss".into(), 0.25)]) }, "09000000000000f83f10032a0d0a0b0a046c6f7373150000803e"),
            (Event { wall_time: 1.5, step: 0, what: What::FileVersion(FILE_VERSION.into()) }, "09000000000000f83f1a0d627261696e2e4576656e743a32"),
            (Event { wall_time: 1.5, step: 300, what: What::Start }, "09000000000000f83f10ac023a020801"),
        ];
        for (event, golden) in cases {
            assert_eq!(hex(&event.encode()), golden, "{event:?}");
            assert_eq!(Event::decode(&event.encode()).unwrap(), event);
        }
    }

    #[test]
    fn records_check_their_crcs_and_name_the_bad_offset() {
        let mut bytes = record(b"first");
        bytes.extend(record(b"second"));
        let (all, err) = records(&bytes);
        assert_eq!(all, vec![&b"first"[..], &b"second"[..]]);
        assert!(err.is_none());
        // A flipped data byte in the second record, then a cut-off tail.
        let mut bad = bytes.clone();
        bad[21 + 12] ^= 1;
        let (all, err) = records(&bad);
        assert_eq!(all.len(), 1);
        assert_eq!(err.unwrap().to_string(), "byte 21: the data's CRC does not match");
        let (all, err) = records(&bytes[..bytes.len() - 3]);
        assert_eq!(all.len(), 1);
        assert!(err.unwrap().to_string().starts_with("byte 21: a record without its data CRC"), "truncated");
    }

    #[test]
    fn scalars_flatten_numbers_and_booleans_and_skip_step_and_nulls() {
        let row = serde_json::json!({"step": 4, "loss": 0.5, "kl": null, "skipped": true, "tasks": {"a": 1}, "note": "x"});
        assert_eq!(scalars(&row), vec![("loss".into(), 0.5), ("skipped".into(), 1.0), ("tasks/a".into(), 1.0)]);
    }

    /// The steps of each scalar event in `dir`, file by file.
    fn steps(dir: &Path) -> Vec<Vec<i64>> {
        own_files(dir)
            .unwrap()
            .iter()
            .map(|p| {
                let bytes = std::fs::read(p).unwrap();
                let (all, err) = records(&bytes);
                assert!(err.is_none());
                all.iter().map(|d| Event::decode(d).unwrap()).filter(|e| matches!(e.what, What::Scalars(_))).map(|e| e.step).collect()
            })
            .collect()
    }

    #[test]
    fn a_restart_cuts_the_earlier_files_back_to_its_starting_step() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = EventWriter::create(dir.path(), 0).unwrap();
        for s in 1..=4 {
            w.write(s, vec![("loss".into(), s as f32)]).unwrap();
        }
        drop(w);
        // Resumed from step 2: steps 3 and 4 are redone in a new file.
        let mut w = EventWriter::create(dir.path(), 2).unwrap();
        w.write(3, vec![("loss".into(), 30.0)]).unwrap();
        assert_eq!(steps(dir.path()), vec![vec![1, 2], vec![3]]);
        let names: Vec<_> = own_files(dir.path()).unwrap();
        assert_eq!(names[1], w.path(), "the new file sorts last");
        // A fresh start (--overwrite) leaves no earlier file.
        drop(w);
        let w = EventWriter::create(dir.path(), 0).unwrap();
        assert_eq!(own_files(dir.path()).unwrap(), vec![w.path().to_path_buf()]);
    }
}
