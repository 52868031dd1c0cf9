//! A safetensors writer that streams: the header is computed from the
//! tensors' shapes and dtypes, then each tensor is copied to the host,
//! written and dropped before the next one. Host memory during a save is the
//! model's own plus one tensor (`safetensors::serialize_to_file` wants every
//! tensor on the host at once: 48 GB for Qwen3-4B's optimizer state on a GPU).
//! The files are ordinary safetensors (the crate's reader, transformers).

use crate::error::{Error, Result};
use candle_core::{DType, Device, Tensor};
use std::collections::HashMap;
use std::io::{BufWriter, Write};
use std::path::Path;

/// Write `tensors` (in this order) to `path` with optional `__metadata__`.
pub fn write(path: &Path, tensors: &[(String, &Tensor)], metadata: Option<&HashMap<String, String>>) -> Result<()> {
    let err = |message: String| Error::Safetensors { path: path.into(), message };
    let header = header(tensors, metadata).map_err(err)?;
    let file = std::fs::File::create(path).map_err(|e| Error::io(path, e))?;
    let mut out = BufWriter::with_capacity(1 << 20, file);
    let io = |e: std::io::Error| Error::io(path, e);
    out.write_all(&(header.len() as u64).to_le_bytes()).map_err(io)?;
    out.write_all(header.as_bytes()).map_err(io)?;
    for (name, t) in tensors {
        let host = t.to_device(&Device::Cpu)?.contiguous()?;
        let bytes = safetensors::View::data(&host);
        if bytes.len() != t.elem_count() * t.dtype().size_in_bytes() {
            return Err(err(format!("{name}: {} bytes for {} elements", bytes.len(), t.elem_count())));
        }
        out.write_all(&bytes).map_err(io)?;
    }
    out.flush().map_err(io)?;
    Ok(())
}

/// A safetensors file read tensor by tensor: the header up front, each
/// tensor's bytes read (not mapped) when asked for, so reading the whole
/// file never holds more than one tensor beyond what the caller keeps.
pub struct Reader {
    path: std::path::PathBuf,
    file: std::fs::File,
    data_start: u64,
    entries: std::collections::BTreeMap<String, Entry>,
}

/// One tensor's place in the file.
struct Entry {
    dtype: DType,
    shape: Vec<usize>,
    start: u64,
    end: u64,
}

impl Reader {
    pub fn open(path: &Path) -> Result<Reader> {
        let err = |message: String| Error::Safetensors { path: path.into(), message };
        let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
        let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
        let mut n = [0u8; 8];
        read_at(&file, &mut n, 0).map_err(|e| Error::io(path, e))?;
        let header_len = u64::from_le_bytes(n);
        if header_len > len.saturating_sub(8) {
            return Err(err(format!("header of {header_len} bytes in a file of {len} bytes (truncated?)")));
        }
        let mut text = vec![0u8; header_len as usize];
        read_at(&file, &mut text, 8).map_err(|e| Error::io(path, e))?;
        let header: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(&text).map_err(|e| err(format!("header: {e}")))?;
        let data_start = 8 + header_len;
        let mut entries = std::collections::BTreeMap::new();
        for (name, v) in header.into_iter().filter(|(k, _)| k != "__metadata__") {
            let bad = || err(format!("header entry {name} is malformed"));
            let code = v["dtype"].as_str().ok_or_else(bad)?;
            let dtype = DTYPES.iter().find(|(_, c)| *c == code).map(|&(d, _)| d).ok_or_else(|| err(format!("{name}: dtype {code} is not supported")))?;
            let shape: Vec<usize> = serde_json::from_value(v["shape"].clone()).map_err(|_| bad())?;
            let offsets: [u64; 2] = serde_json::from_value(v["data_offsets"].clone()).map_err(|_| bad())?;
            let bytes = shape.iter().product::<usize>() as u64 * dtype.size_in_bytes() as u64;
            if offsets[1] < offsets[0] || offsets[1] - offsets[0] != bytes || data_start + offsets[1] > len {
                return Err(err(format!("{name}: data offsets {offsets:?} do not fit its shape {shape:?} or the file (truncated?)")));
            }
            entries.insert(name, Entry { dtype, shape, start: offsets[0], end: offsets[1] });
        }
        Ok(Reader { path: path.into(), file, data_start, entries })
    }

    /// Tensor names, sorted.
    pub fn names(&self) -> Vec<String> {
        self.entries.keys().cloned().collect()
    }

    /// A tensor's shape, without reading it.
    pub fn shape(&self, name: &str) -> Option<&[usize]> {
        self.entries.get(name).map(|e| e.shape.as_slice())
    }

    /// Reads one tensor onto `device`.
    pub fn load(&self, name: &str, device: &Device) -> Result<Tensor> {
        let e = self.entries.get(name).ok_or_else(|| Error::Safetensors { path: self.path.clone(), message: format!("no tensor {name}") })?;
        let at = self.data_start + e.start;
        let io = |err: std::io::Error| Error::io(&self.path, err);
        if e.dtype == DType::F32 && cfg!(target_endian = "little") {
            // Read straight into the tensor's storage: no second host copy.
            let mut values = vec![0f32; e.shape.iter().product()];
            // SAFETY: any bit pattern is a valid f32; the byte view covers exactly `values`.
            let bytes = unsafe { std::slice::from_raw_parts_mut(values.as_mut_ptr().cast::<u8>(), values.len() * 4) };
            read_at(&self.file, bytes, at).map_err(io)?;
            return Ok(Tensor::from_vec(values, e.shape.as_slice(), &Device::Cpu)?.to_device(device)?);
        }
        let mut bytes = vec![0u8; (e.end - e.start) as usize];
        read_at(&self.file, &mut bytes, at).map_err(io)?;
        Ok(Tensor::from_raw_buffer(&bytes, e.dtype, &e.shape, &Device::Cpu)?.to_device(device)?)
    }
}

fn read_at(file: &std::fs::File, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    file.read_exact_at(buf, offset)
}

/// The JSON header, padded with spaces to a multiple of 8 bytes.
fn header(tensors: &[(String, &Tensor)], metadata: Option<&HashMap<String, String>>) -> std::result::Result<String, String> {
    let mut map = serde_json::Map::new();
    if let Some(m) = metadata {
        map.insert("__metadata__".into(), serde_json::to_value(m).map_err(|e| e.to_string())?);
    }
    let mut offset = 0usize;
    for (name, t) in tensors {
        if name == "__metadata__" || map.contains_key(name) {
            return Err(format!("tensor name {name} is reserved or repeated"));
        }
        let bytes = t.elem_count() * t.dtype().size_in_bytes();
        map.insert(name.clone(), serde_json::json!({"dtype": dtype_code(t.dtype())?, "shape": t.dims(), "data_offsets": [offset, offset + bytes]}));
        offset += bytes;
    }
    let mut text = serde_json::Value::Object(map).to_string();
    while !text.len().is_multiple_of(8) {
        text.push(' ');
    }
    Ok(text)
}

/// The dtypes written and read here, with their safetensors spelling.
const DTYPES: [(DType, &str); 7] =
    [(DType::F32, "F32"), (DType::F16, "F16"), (DType::BF16, "BF16"), (DType::F64, "F64"), (DType::U32, "U32"), (DType::U8, "U8"), (DType::I64, "I64")];

/// The safetensors spelling of a dtype.
fn dtype_code(d: DType) -> std::result::Result<&'static str, String> {
    DTYPES.iter().find(|(x, _)| *x == d).map(|&(_, c)| c).ok_or_else(|| format!("dtype {d:?} has no safetensors writer here"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streamed_files_read_back_bit_for_bit() {
        let dev = Device::Cpu;
        let a = Tensor::arange(0f32, 12.0, &dev).unwrap().reshape((3, 4)).unwrap();
        let b = Tensor::new(&[1.5f32, -2.25], &dev).unwrap().to_dtype(DType::BF16).unwrap();
        let c = Tensor::new(&[7i64], &dev).unwrap();
        let t = a.t().unwrap(); // strided: written as its contiguous copy
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("x.safetensors");
        let meta: HashMap<String, String> = [("format".to_string(), "pt".to_string())].into();
        write(&path, &[("a".into(), &a), ("b".into(), &b), ("c".into(), &c), ("t".into(), &t)], Some(&meta)).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
        assert_eq!(st.len(), 4);
        let (_, m) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
        assert_eq!(m.metadata().as_ref().unwrap()["format"], "pt");
        let back = candle_core::safetensors::load(&path, &dev).unwrap();
        assert_eq!(back["a"].to_vec2::<f32>().unwrap(), a.to_vec2::<f32>().unwrap());
        assert_eq!(back["b"].dtype(), DType::BF16);
        assert_eq!(back["b"].to_dtype(DType::F32).unwrap().to_vec1::<f32>().unwrap(), vec![1.5, -2.25]);
        assert_eq!(back["c"].to_vec1::<i64>().unwrap(), vec![7]);
        assert_eq!(back["t"].to_vec2::<f32>().unwrap(), t.to_vec2::<f32>().unwrap());
        let r = Reader::open(&path).unwrap();
        assert_eq!(r.names(), vec!["a", "b", "c", "t"]);
        assert_eq!(r.shape("t"), Some(&[4usize, 3][..]));
        assert_eq!(r.load("t", &dev).unwrap().to_vec2::<f32>().unwrap(), t.to_vec2::<f32>().unwrap());
        assert_eq!(r.load("b", &dev).unwrap().dtype(), DType::BF16);
        assert!(r.load("zz", &dev).is_err());
        std::fs::write(&path, &bytes[..bytes.len() - 4]).unwrap();
        let e = Reader::open(&path).err().expect("a truncated file is refused");
        assert!(e.to_string().contains("truncated"), "{e}");
        assert!(write(&path, &[("a".into(), &a), ("a".into(), &a)], None).is_err(), "repeated names");
    }
}
