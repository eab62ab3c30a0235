//! Minimal reader/writer for NumPy `.npy` float32 arrays (C order), enough for
//! `--pixel-values` inputs, `--logits-out` and the reference fixtures.

use std::io::Write;
use std::path::Path;

#[derive(Debug, thiserror::Error)]
pub enum NpyError {
    #[error("cannot read {path}: {err}")]
    Io {
        path: String,
        #[source]
        err: std::io::Error,
    },
    #[error("{path} is not a float32 .npy array: {reason}")]
    Format {
        path: String,
        #[source]
        reason: FormatError,
    },
}

/// Why bytes are not a float32 `.npy` array.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    #[error("missing the \\x93NUMPY magic")]
    Magic,
    #[error("unsupported .npy version {0}")]
    Version(u8),
    #[error("truncated header")]
    TruncatedHeader,
    /// A header key that must be there (descr, fortran_order, shape).
    #[error("no {0}")]
    MissingKey(&'static str),
    #[error("dtype {0}, expected '<f4' (float32)")]
    Dtype(String),
    #[error("Fortran-ordered arrays are not supported")]
    FortranOrder,
    #[error("bad shape {0}")]
    Shape(String),
    #[error("shape {shape:?} needs {needed} data bytes, file has {actual}")]
    DataSize { shape: Vec<usize>, needed: usize, actual: usize },
}

#[derive(Clone, Debug, PartialEq)]
pub struct NpyArray {
    pub shape: Vec<usize>,
    pub data: Vec<f32>,
}

fn header_value<'a>(header: &'a str, key: &str) -> Option<&'a str> {
    let start = header.find(&format!("'{key}'"))? + key.len() + 2;
    let rest = header[start..].trim_start().strip_prefix(':')?.trim_start();
    if rest.starts_with('(') {
        return rest.find(')').map(|end| &rest[..=end]);
    }
    let end = rest.find([',', '}']).unwrap_or(rest.len());
    Some(rest[..end].trim())
}

pub fn read_f32(path: impl AsRef<Path>) -> Result<NpyArray, NpyError> {
    let path = path.as_ref();
    let name = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|err| NpyError::Io { path: name.clone(), err })?;
    parse_f32(&bytes).map_err(|reason| NpyError::Format { path: name, reason })
}

pub fn parse_f32(bytes: &[u8]) -> Result<NpyArray, FormatError> {
    if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
        return Err(FormatError::Magic);
    }
    let (header_len, header_start) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 if bytes.len() >= 12 => (u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize, 12),
        v => return Err(FormatError::Version(v)),
    };
    let header = bytes
        .get(header_start..header_start + header_len)
        .and_then(|h| std::str::from_utf8(h).ok())
        .ok_or(FormatError::TruncatedHeader)?;
    let descr = header_value(header, "descr").ok_or(FormatError::MissingKey("descr"))?;
    if !matches!(descr.trim_matches(|c| c == '\'' || c == '"'), "<f4" | "=f4" | "f4") {
        return Err(FormatError::Dtype(descr.to_string()));
    }
    if header_value(header, "fortran_order").ok_or(FormatError::MissingKey("fortran_order"))? != "False" {
        return Err(FormatError::FortranOrder);
    }
    let shape_text = header_value(header, "shape").ok_or(FormatError::MissingKey("shape"))?;
    let shape = shape_text
        .trim_matches(|c| c == '(' || c == ')')
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<usize>().map_err(|_| FormatError::Shape(shape_text.to_string())))
        .collect::<Result<Vec<_>, _>>()?;
    let count: usize = shape.iter().product();
    let body = &bytes[header_start + header_len..];
    if body.len() != count * 4 {
        return Err(FormatError::DataSize { needed: count * 4, actual: body.len(), shape });
    }
    let data = body.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
    Ok(NpyArray { shape, data })
}

pub fn write_f32(path: impl AsRef<Path>, shape: &[usize], data: &[f32]) -> Result<(), NpyError> {
    let path = path.as_ref();
    let name = path.display().to_string();
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let shape_text = if dims.len() == 1 { format!("({},)", dims[0]) } else { format!("({})", dims.join(", ")) };
    let mut header = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': {shape_text}, }}");
    // Total header (magic 10 bytes + text + newline) is padded to 64 bytes.
    let pad = 64 - (10 + header.len() + 1) % 64;
    header.push_str(&" ".repeat(pad % 64));
    header.push('\n');
    let mut out = Vec::with_capacity(10 + header.len() + data.len() * 4);
    out.extend_from_slice(b"\x93NUMPY\x01\x00");
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    for v in data {
        out.extend_from_slice(&v.to_le_bytes());
    }
    std::fs::File::create(path)
        .and_then(|mut f| f.write_all(&out))
        .map_err(|err| NpyError::Io { path: name, err })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.npy");
        write_f32(&p, &[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.5]).unwrap();
        let a = read_f32(&p).unwrap();
        assert_eq!(a.shape, vec![2, 3]);
        assert_eq!(a.data[5], 6.5);
        let bytes = std::fs::read(&p).unwrap();
        assert_eq!((bytes.len() - 24) % 64, 0, "header is 64-byte aligned");
    }

    #[test]
    fn rejects_other_dtypes_and_truncation() {
        let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
        let h = "{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }\n";
        bytes.extend_from_slice(&(h.len() as u16).to_le_bytes());
        bytes.extend_from_slice(h.as_bytes());
        assert!(parse_f32(&bytes).unwrap_err().to_string().contains("<f8"));
        let h = "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }\n";
        let mut b2 = b"\x93NUMPY\x01\x00".to_vec();
        b2.extend_from_slice(&(h.len() as u16).to_le_bytes());
        b2.extend_from_slice(h.as_bytes());
        b2.extend_from_slice(&[0u8; 8]);
        assert!(parse_f32(&b2).unwrap_err().to_string().contains("needs 16"));
    }
}
