//! Reading a safetensors file's header without reading its tensors.

use std::collections::HashMap;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use safetensors::tensor::Metadata;
use safetensors::Dtype;

use crate::MergeError;

/// The largest header the safetensors format allows (100 MB).
const MAX_HEADER_BYTES: u64 = 100_000_000;

/// One tensor's place in a file.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub name: String,
    pub dtype: Dtype,
    pub shape: Vec<usize>,
    /// Byte offset of the tensor's first byte from the start of the file.
    pub start: u64,
    /// Length in bytes.
    pub len: u64,
}

/// An open safetensors file whose header has been read and checked.
#[derive(Debug)]
pub(crate) struct Checkpoint {
    pub path: PathBuf,
    pub file: File,
    /// The 8-byte header length and the JSON header, verbatim.
    pub header: Vec<u8>,
    /// The tensors in the order of their data offsets.
    pub entries: Vec<Entry>,
    /// Tensor name to index in `entries`.
    pub index: HashMap<String, usize>,
}

impl Checkpoint {
    /// Opens `path` and reads its header; checks that the header is valid
    /// and that the file holds exactly the data the header describes.
    pub fn open(path: &Path) -> Result<Self, MergeError> {
        let read_err = |source| MergeError::Read {
            path: path.to_path_buf(),
            source,
        };
        let invalid = |reason: String| MergeError::Invalid {
            path: path.to_path_buf(),
            reason,
        };
        // The kind first: opening a FIFO would block, a device never ends.
        if !std::fs::metadata(path).map_err(read_err)?.is_file() {
            return Err(invalid(
                "not a regular file (a directory, FIFO, socket or device)".into(),
            ));
        }
        let mut file = File::open(path).map_err(read_err)?;
        let file_len = file.metadata().map_err(read_err)?.len();
        if file_len < 8 {
            return Err(invalid(format!(
                "{file_len} bytes long, shorter than the 8-byte header length"
            )));
        }
        let mut n = [0u8; 8];
        file.read_exact(&mut n).map_err(read_err)?;
        let n = u64::from_le_bytes(n);
        if n > MAX_HEADER_BYTES {
            return Err(invalid(format!(
                "header length {n} is over the format's limit of {MAX_HEADER_BYTES} bytes"
            )));
        }
        if 8 + n > file_len {
            return Err(invalid(format!(
                "header length {n} runs past the end of the {file_len}-byte file"
            )));
        }
        let mut header = vec![0u8; 8 + n as usize];
        header[..8].copy_from_slice(&n.to_le_bytes());
        file.read_exact(&mut header[8..]).map_err(read_err)?;
        let metadata: Metadata = serde_json::from_slice(&header[8..])
            .map_err(|e| invalid(format!("bad header: {e}")))?;
        let data_start = 8 + n;
        let data_len = metadata.data_len() as u64;
        if data_start + data_len != file_len {
            return Err(invalid(format!(
                "header describes {data_len} bytes of tensor data, the file holds {}",
                file_len - data_start
            )));
        }
        let mut entries = Vec::new();
        let mut index = HashMap::new();
        for name in metadata.offset_keys() {
            let Some(info) = metadata.info(&name) else {
                return Err(invalid(format!("tensor `{name}` vanished from the header")));
            };
            let (s, e) = info.data_offsets;
            index.insert(name.clone(), entries.len());
            entries.push(Entry {
                name,
                dtype: info.dtype,
                shape: info.shape.clone(),
                start: data_start + s as u64,
                len: (e - s) as u64,
            });
        }
        Ok(Self {
            path: path.to_path_buf(),
            file,
            header,
            entries,
            index,
        })
    }

    /// The tensor named `name`, if the file has one.
    pub fn get(&self, name: &str) -> Option<&Entry> {
        self.index.get(name).and_then(|&i| self.entries.get(i))
    }
}

/// The model's global step a checkpoint records: its tensor `step`, one
/// integer (the job protocol's convention; the example trainer writes it).
/// `None` when the file has no such tensor.
pub fn read_step(path: &Path) -> Result<Option<u64>, MergeError> {
    use std::io::{Seek, SeekFrom};
    let mut c = Checkpoint::open(path)?;
    let Some(e) = c.get("step").cloned() else {
        return Ok(None);
    };
    let read_err = |source| MergeError::Read {
        path: path.to_path_buf(),
        source,
    };
    let mut buf = [0u8; 8];
    let n = e.len as usize;
    if !matches!(
        (e.dtype, n),
        (Dtype::I64 | Dtype::U64, 8) | (Dtype::I32 | Dtype::U32, 4)
    ) {
        return Ok(None);
    }
    c.file.seek(SeekFrom::Start(e.start)).map_err(read_err)?;
    c.file.read_exact(&mut buf[..n]).map_err(read_err)?;
    let step = match e.dtype {
        Dtype::I64 => u64::try_from(i64::from_le_bytes(buf)).ok(),
        Dtype::U64 => Some(u64::from_le_bytes(buf)),
        Dtype::I32 => u64::try_from(i32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]])).ok(),
        _ => Some(u64::from(u32::from_le_bytes([
            buf[0], buf[1], buf[2], buf[3],
        ]))),
    };
    Ok(step)
}

/// Sets the `step` tensor of the checkpoint at `path` to `step`, in place
/// (its dtype kept), and syncs the file; returns whether it did: a file
/// without a one-integer `step`, or a step its dtype cannot hold, is left
/// as it is. For a merged file before it is renamed into place: the merge
/// takes integer tensors from one copy, while the merged model's step is
/// where the job stands, the copies' work added up.
pub fn write_step(path: &Path, step: u64) -> Result<bool, MergeError> {
    use std::io::{Seek, SeekFrom, Write};
    let c = Checkpoint::open(path)?;
    let Some(e) = c.get("step").cloned() else {
        return Ok(false);
    };
    let bytes: Vec<u8> = match (e.dtype, e.len) {
        (Dtype::I64, 8) => match i64::try_from(step) {
            Ok(v) => v.to_le_bytes().to_vec(),
            Err(_) => return Ok(false),
        },
        (Dtype::U64, 8) => step.to_le_bytes().to_vec(),
        (Dtype::I32, 4) => match i32::try_from(step) {
            Ok(v) => v.to_le_bytes().to_vec(),
            Err(_) => return Ok(false),
        },
        (Dtype::U32, 4) => match u32::try_from(step) {
            Ok(v) => v.to_le_bytes().to_vec(),
            Err(_) => return Ok(false),
        },
        _ => return Ok(false),
    };
    let write_err = |source| MergeError::Write {
        path: path.to_path_buf(),
        source,
    };
    drop(c);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(write_err)?;
    f.seek(SeekFrom::Start(e.start)).map_err(write_err)?;
    f.write_all(&bytes).map_err(write_err)?;
    f.sync_all().map_err(write_err)?;
    Ok(true)
}
