//! One GPU vendor's probe: driver, runtime libraries, device count, all in one report.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::context::ProbeContext;
use crate::driver::DriverReport;
use crate::library::{self, LibraryReport, LibrarySpec};
use crate::paths::{RejectedEntry, SearchPath};

/// How to probe one vendor. The constants live in `cuda.rs` and `rocm.rs`.
#[derive(Debug)]
pub(crate) struct VendorSpec {
    pub key: &'static str,
    pub label: &'static str,
    pub libraries: &'static [LibrarySpec],
    /// The library (by [`LibrarySpec::name`]) and its init / count symbols.
    pub count_library: &'static str,
    pub init_symbol: Option<&'static str>,
    pub count_symbol: &'static str,
    pub visible_vars: &'static [&'static str],
}

/// A visible-devices variable in force (`CUDA_VISIBLE_DEVICES=0`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct VisibleDevices {
    pub variable: String,
    pub value: String,
}

/// Everything the probe knows about one vendor. Serialised as-is by `doctor --json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[non_exhaustive]
pub struct VendorReport {
    pub vendor: String,
    /// Whether this build contains support for the vendor at all.
    pub compiled: bool,
    pub driver_present: bool,
    /// Driver present, core libraries loaded, and at least one device counted.
    pub available: bool,
    pub device_count: Option<u32>,
    pub driver: DriverReport,
    pub libraries: Vec<LibraryReport>,
    /// Folders searched for the vendor's libraries, in order.
    pub search_path: Vec<PathBuf>,
    /// Environment entries that were not searched, and why.
    pub rejected_entries: Vec<RejectedEntry>,
    pub visible_devices: Vec<VisibleDevices>,
    /// One line: why the vendor is or is not available.
    pub summary: String,
}

impl VendorReport {
    /// The report for a vendor whose support this build does not contain.
    #[cfg_attr(feature = "rocm", allow(dead_code))]
    pub(crate) fn not_compiled(vendor: &str, summary: &str) -> Self {
        Self {
            vendor: vendor.to_owned(),
            compiled: false,
            driver_present: false,
            available: false,
            device_count: None,
            driver: DriverReport::default(),
            libraries: Vec::new(),
            search_path: Vec::new(),
            rejected_entries: Vec::new(),
            visible_devices: Vec::new(),
            summary: summary.to_owned(),
        }
    }
}

pub(crate) fn probe_vendor(
    ctx: &ProbeContext,
    spec: &VendorSpec,
    search: SearchPath,
    driver: DriverReport,
) -> VendorReport {
    let libraries: Vec<LibraryReport> = spec.libraries.iter().map(|l| library::find(l, &search.dirs)).collect();
    let visible_devices: Vec<VisibleDevices> = spec
        .visible_vars
        .iter()
        .filter_map(|v| {
            ctx.var(v)
                .map(|val| VisibleDevices { variable: (*v).to_owned(), value: val.to_string_lossy().into_owned() })
        })
        .collect();
    let mut report = VendorReport {
        vendor: spec.key.to_owned(),
        compiled: true,
        driver_present: driver.present,
        available: false,
        device_count: None,
        driver,
        libraries,
        search_path: search.dirs.clone(),
        rejected_entries: search.rejected,
        visible_devices,
        summary: String::new(),
    };
    report.summary = settle(spec, &mut report, &search.dirs);
    report
}

/// Loads the libraries and counts devices, only when the driver is present; returns the summary.
fn settle(spec: &VendorSpec, report: &mut VendorReport, dirs: &[PathBuf]) -> String {
    if !report.driver_present {
        let why = report.driver.problems.first().cloned().unwrap_or_else(|| "no driver files found".to_owned());
        return format!("{}: not available: no {} driver ({why})", spec.label, spec.label);
    }
    if let Some(hidden) = report.visible_devices.iter().find(|v| v.value.trim().is_empty() || v.value.trim() == "-1") {
        report.device_count = Some(0);
        return format!("{}: not available: {}={:?} hides every device", spec.label, hidden.variable, hidden.value);
    }
    for lib in report.libraries.iter_mut() {
        let (Some(path), Some(soname)) = (lib.path.clone(), lib.soname.clone()) else {
            if lib.required {
                return format!(
                    "{}: not available: {} is missing ({}); searched: {}",
                    spec.label,
                    lib.name,
                    lib.error.as_deref().unwrap_or("not found"),
                    join_dirs(&lib.searched)
                );
            }
            continue;
        };
        match library::load_with_deps(&path, &soname, dirs) {
            Ok(()) => lib.loaded = true,
            Err(e) => {
                lib.error = Some(e.clone());
                if lib.required {
                    return format!("{}: not available: {} failed to load: {e}", spec.label, path.display());
                }
            }
        }
    }
    let Some(count_lib) = report.libraries.iter().find(|l| l.name == spec.count_library).and_then(|l| l.soname.clone())
    else {
        return format!("{}: not available: {} was not found", spec.label, spec.count_library);
    };
    if let Some(init) = spec.init_symbol
        && let Err(e) = library::call_init(&count_lib, init)
    {
        report.device_count = Some(0);
        return format!("{}: not available: {e}", spec.label);
    }
    match library::call_count(&count_lib, spec.count_symbol) {
        Err(e) => {
            report.device_count = Some(0);
            format!("{}: not available: {e}", spec.label)
        }
        Ok(n) if n <= 0 => {
            report.device_count = Some(0);
            format!("{}: not available: the runtime counts no device", spec.label)
        }
        Ok(n) => {
            report.device_count = Some(n as u32);
            report.available = true;
            format!("{}: available: {n} device(s)", spec.label)
        }
    }
}

pub(crate) fn join_dirs(dirs: &[PathBuf]) -> String {
    if dirs.is_empty() {
        return "(no folder exists)".to_owned();
    }
    dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", ")
}
