//! The whole probe result and its human-readable form.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::vendor::VendorReport;

/// What the probe found on this machine for every vendor. Serialisable; field names are stable.
///
/// ```
/// let report = nornir_gpu_probe::probe();
/// let (ready, why) = report.preflight();
/// println!("GPU ready: {ready} ({why}); probed in {} µs", report.probe_micros);
/// println!("{}", serde_json::to_string(report).expect("a report serialises"));
/// ```
#[derive(Debug, Clone, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ProbeReport {
    pub cuda: VendorReport,
    /// On a build without AMD support: `compiled: false` and a summary naming the feature to add.
    pub rocm: VendorReport,
    /// Wall time the probe took, in microseconds.
    pub probe_micros: u64,
}

impl ProbeReport {
    /// `(gpu_ready, human_report)`: whether any vendor is available, and the text of [`fmt::Display`].
    pub fn preflight(&self) -> (bool, String) {
        (self.cuda.available || self.rocm.available, self.to_string())
    }
}

impl fmt::Display for ProbeReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.cuda)?;
        writeln!(f)?;
        write!(f, "{}", self.rocm)
    }
}

/// One vendor's section, as `doctor` prints it: summary, driver, libraries, variables.
impl fmt::Display for VendorReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = self;
        writeln!(f, "{}", v.summary)?;
        if !v.compiled {
            return Ok(());
        }
        let d = &v.driver;
        writeln!(
            f,
            "  driver: {}{}",
            if d.present { "present" } else { "absent" },
            d.version.as_deref().map(|v| format!(" (version {v})")).unwrap_or_default()
        )?;
        for e in &d.evidence {
            writeln!(f, "    found: {e}")?;
        }
        for p in &d.problems {
            writeln!(f, "    {p}")?;
        }
        for g in &d.gpus {
            writeln!(f, "    gpu: {g}")?;
        }
        if let Some(n) = v.device_count {
            writeln!(f, "  devices counted by the runtime: {n}")?;
        }
        for lib in &v.libraries {
            match &lib.path {
                Some(p) => writeln!(
                    f,
                    "  {}: {} (version {}){}{}",
                    lib.name,
                    p.display(),
                    lib.version.as_deref().unwrap_or("unknown"),
                    if lib.loaded {
                        ", loaded"
                    } else if v.driver_present {
                        ""
                    } else {
                        ", not loaded (no driver)"
                    },
                    lib.error.as_deref().map(|e| format!(", error: {e}")).unwrap_or_default()
                )?,
                None => writeln!(
                    f,
                    "  {}: missing{} ({})",
                    lib.name,
                    if lib.required { "" } else { " (optional)" },
                    lib.error.as_deref().unwrap_or("not found")
                )?,
            }
            for r in &lib.rejected {
                writeln!(f, "    refused {r}")?;
            }
        }
        writeln!(f, "  searched: {}", crate::vendor::join_dirs(&v.search_path))?;
        for r in &v.rejected_entries {
            writeln!(f, "  ignored {}={:?}: {}", r.variable, r.entry, r.reason)?;
        }
        for vis in &v.visible_devices {
            writeln!(f, "  {}={:?}", vis.variable, vis.value)?;
        }
        Ok(())
    }
}
