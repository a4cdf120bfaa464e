//! The machine the figures come from, and CPU accounting from `/proc`
//! (Linux; elsewhere the CPU columns read zero).

use std::fmt;

/// What is printed (and recorded) about the machine.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Machine {
    pub cpus: usize,
    pub cpu_model: String,
    pub memory_gib: f64,
    pub kernel: String,
    pub virtualized: bool,
}

impl Machine {
    pub fn detect() -> Self {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find_map(|l| {
                l.strip_prefix("model name")
                    .map(|rest| rest.trim_start_matches([' ', '\t', ':']).trim().to_owned())
            })
            .unwrap_or_else(|| "unknown".into());
        let virtualized = cpuinfo
            .lines()
            .any(|l| l.starts_with("flags") && l.split_whitespace().any(|f| f == "hypervisor"));
        let memory_gib = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|m| {
                m.lines().find_map(|l| {
                    l.strip_prefix("MemTotal:")
                        .and_then(|v| v.split_whitespace().next())
                        .and_then(|kb| kb.parse::<f64>().ok())
                })
            })
            .map(|kb| kb / (1024.0 * 1024.0))
            .unwrap_or(0.0);
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| format!("Linux {}", s.trim()))
            .unwrap_or_else(|_| std::env::consts::OS.to_owned());
        Self {
            cpus: online_cpus(),
            cpu_model,
            memory_gib,
            kernel,
            virtualized,
        }
    }
}

impl fmt::Display for Machine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "machine: {} CPU(s), {}, {:.1} GiB RAM, {}{}",
            self.cpus,
            self.cpu_model,
            self.memory_gib,
            self.kernel,
            if self.virtualized {
                ", virtual machine"
            } else {
                ""
            }
        )
    }
}

/// CPUs online on the machine (not only those this process may use).
pub fn online_cpus() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    if n > 0 {
        n as usize
    } else {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    }
}

fn clock_ticks_per_second() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 { t as f64 } else { 100.0 }
}

/// User + system CPU seconds of a process (all threads); `None` = this one.
pub fn process_cpu_seconds(pid: Option<u32>) -> Option<f64> {
    let path = match pid {
        Some(p) => format!("/proc/{p}/stat"),
        None => "/proc/self/stat".to_owned(),
    };
    let stat = std::fs::read_to_string(path).ok()?;
    // Fields after the parenthesised command: state is field 3, utime 14, stime 15.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / clock_ticks_per_second())
}

/// User + system CPU seconds of a process's children that ended and were
/// reaped by it (`cutime` + `cstime`): processes that came and went
/// between two readings still count.
pub fn reaped_children_cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let cutime: f64 = fields.get(13)?.parse().ok()?;
    let cstime: f64 = fields.get(14)?.parse().ok()?;
    Some((cutime + cstime) / clock_ticks_per_second())
}

/// Whole-machine CPU counters from `/proc/stat` (in ticks).
#[derive(Debug, Clone, Copy, Default)]
pub struct CpuTimes {
    total: u64,
    idle: u64,
}

pub fn cpu_times() -> CpuTimes {
    let Ok(stat) = std::fs::read_to_string("/proc/stat") else {
        return CpuTimes::default();
    };
    let Some(line) = stat.lines().find(|l| l.starts_with("cpu ")) else {
        return CpuTimes::default();
    };
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal (guest* are inside user)
    let total = v.iter().take(8).sum();
    let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
    CpuTimes { total, idle }
}

/// Fraction of all CPUs busy between two readings.
pub fn busy_fraction(a: &CpuTimes, b: &CpuTimes) -> f64 {
    let total = b.total.saturating_sub(a.total);
    if total == 0 {
        return 0.0;
    }
    1.0 - b.idle.saturating_sub(a.idle) as f64 / total as f64
}
