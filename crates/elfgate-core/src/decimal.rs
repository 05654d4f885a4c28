//! Integers written in decimal without `core::fmt`.

/// `n` in decimal, written into `buf` from its end: the digits are the returned slice. For the
/// event's `seq` and the SSE frame's `id`, written for every event (`core::fmt` costs several
/// hundred instructions for one integer).
pub fn digits(n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut at = buf.len();
    let mut n = n;
    loop {
        at -= 1;
        // The remainder is a single digit.
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    &buf[at..]
}

/// [`digits`] as a `&str`.
pub fn digits_str(n: u64, buf: &mut [u8; 20]) -> &str {
    // Only ASCII digits are written, so this never falls back.
    std::str::from_utf8(digits(n, buf)).unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::{digits, digits_str};

    #[test]
    fn writes_what_display_writes() {
        let mut buf = [0u8; 20];
        for n in [
            0,
            1,
            9,
            10,
            99,
            100,
            12345,
            u64::from(u32::MAX),
            u64::MAX - 1,
            u64::MAX,
        ] {
            assert_eq!(digits(n, &mut buf), n.to_string().as_bytes(), "{n}");
            assert_eq!(digits_str(n, &mut buf), n.to_string(), "{n}");
        }
    }
}
