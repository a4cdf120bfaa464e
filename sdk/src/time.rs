//! Time formatting without a calendar crate.

/// Formats `ms` milliseconds since the Unix epoch as an RFC 3339 UTC
/// timestamp with millisecond precision: `2023-11-14T22:13:20.123Z`.
/// Valid for every `u64` input up to the year 9999 (later years print with
/// more digits).
pub fn rfc3339_from_ms(ms: u64) -> String {
    let secs = ms / 1000;
    let millis = ms % 1000;
    let days = secs / 86_400;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

/// Milliseconds since the Unix epoch now, from the wall clock
/// (`wasi:clocks/wall-clock` inside a component). 0 if the clock is before
/// the epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// Days since 1970-01-01 to (year, month, day) in the proleptic Gregorian
/// calendar (Howard Hinnant's `civil_from_days`, for non-negative days).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_dates() {
        assert_eq!(rfc3339_from_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339_from_ms(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(rfc3339_from_ms(951_868_799_999), "2000-02-29T23:59:59.999Z");
        assert_eq!(
            rfc3339_from_ms(1_709_251_199_000),
            "2024-02-29T23:59:59.000Z"
        );
        assert_eq!(
            rfc3339_from_ms(4_102_444_800_000),
            "2100-01-01T00:00:00.000Z"
        );
        assert_eq!(
            rfc3339_from_ms(253_402_300_799_999),
            "9999-12-31T23:59:59.999Z"
        );
    }

    #[test]
    fn now_is_after_2020() {
        assert!(now_ms() > 1_577_836_800_000);
    }
}
