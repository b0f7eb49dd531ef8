//! Human-readable sizes and durations.

const UNITS: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];

/// `1536` -> `"1.5 KiB"`; bytes below 1 KiB are exact (`"512 B"`).
pub fn human_size(bytes: u64) -> String {
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    // 1023.96 KiB would print as "1024.0 KiB": round first, then carry.
    if (value * 10.0).round() / 10.0 >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// A signed size: `"+1.5 KiB"`, `"-12 B"`, `"0 B"`.
pub fn human_size_diff(bytes: i64) -> String {
    match bytes {
        0 => "0 B".to_owned(),
        b if b > 0 => format!("+{}", human_size(b.unsigned_abs())),
        b => format!("-{}", human_size(b.unsigned_abs())),
    }
}

/// A signed count, grouped like [`grouped`]: `"+115,479"`, `"-1"`, `"0"`.
pub fn signed_count(n: i64) -> String {
    match n {
        0 => "0".to_owned(),
        n if n > 0 => format!("+{}", grouped(n.unsigned_abs())),
        n => format!("-{}", grouped(n.unsigned_abs())),
    }
}

/// `1234567` -> `"1,234,567"`.
pub fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `part` as a percentage of `whole`, one decimal: `"45.6%"`.
pub fn percent(part: u64, whole: u64) -> String {
    if whole == 0 {
        return "0.0%".to_owned();
    }
    format!("{:.1}%", part as f64 * 100.0 / whole as f64)
}

/// `1_500_000_000` -> `"1.500 s"`; below a second in ms, below a ms in µs; `"0 s"`.
pub fn human_duration(ns: u64) -> String {
    if ns == 0 {
        "0 s".to_owned()
    } else if ns >= 1_000_000_000 {
        format!("{:.3} s", ns as f64 / 1e9)
    } else if ns >= 1_000_000 {
        format!("{:.1} ms", ns as f64 / 1e6)
    } else {
        format!("{:.1} µs", ns as f64 / 1e3)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_durations() {
        assert_eq!(human_size(0), "0 B");
        assert_eq!(human_size(1023), "1023 B");
        assert_eq!(human_size(1536), "1.5 KiB");
        assert_eq!(human_size(12_897_485), "12.3 MiB");
        assert_eq!(human_size(1024 * 1024 - 1), "1.0 MiB");
        assert_eq!(human_size(u64::MAX), "16.0 EiB");
        assert_eq!(human_size_diff(-2048), "-2.0 KiB");
        assert_eq!(human_size_diff(5), "+5 B");
        assert_eq!(signed_count(-3), "-3");
        assert_eq!(signed_count(115_479), "+115,479");
        assert_eq!(signed_count(-1_234_567), "-1,234,567");
        assert_eq!(signed_count(0), "0");
        assert_eq!(grouped(1_234_567), "1,234,567");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(1000), "1,000");
        assert_eq!(percent(1, 3), "33.3%");
        assert_eq!(percent(1, 0), "0.0%");
        assert_eq!(human_duration(1_500_000_000), "1.500 s");
        assert_eq!(human_duration(2_500_000), "2.5 ms");
        assert_eq!(human_duration(0), "0 s");
        assert_eq!(human_duration(1_500), "1.5 µs");
    }
}
