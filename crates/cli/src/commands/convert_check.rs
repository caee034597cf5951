//! `nornir vector convert`'s conversion with the library's check (`convert_checked`: the folder
//! loaded and embedded on the CPU, a fused encoder compared with the plain graph and replaced by
//! it where it does not run or computes something else).

use std::path::Path;

use anyhow::Result;
use nornir_vector::convert::{Conversion, ConvertOptions};
use nornir_vector::{Device, EmbedderOptions, convert_checked};

/// The folder written and checked, and the check's line (`None` for a head, which is not run).
pub fn convert_folder(source: &Path, output: &Path, options: &ConvertOptions) -> Result<(Conversion, Option<String>)> {
    let checked = convert_checked(source, output, options, &EmbedderOptions::default().with_device(Device::Cpu))?;
    Ok((checked.conversion, checked.check))
}
