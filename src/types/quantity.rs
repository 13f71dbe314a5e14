//! Resource quantities (`100m`, `0.5`, `128Mi`, `1G`, `1e3`): parsing the Kubernetes
//! quantity syntax into exact thousandths of a unit, so requests and allocatable compare
//! without floating point.

use std::fmt;
use std::str::FromStr;

/// A quantity, held in thousandths of its unit. Finer fractions round away from zero, as
/// Kubernetes' `MilliValue` does (`1n` of a CPU is `1m`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Quantity {
    milli: i128,
}

/// Why a quantity does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("quantity {input:?}: {problem}")]
pub struct Error {
    input: String,
    problem: &'static str,
}

impl Quantity {
    pub const ZERO: Quantity = Quantity { milli: 0 };

    pub fn from_milli(milli: i128) -> Self {
        Quantity { milli }
    }

    /// Whole units.
    pub fn from_units(units: i128) -> Self {
        Quantity {
            milli: units.saturating_mul(1000),
        }
    }

    /// In thousandths of the unit (how CPU is compared).
    pub fn milli(self) -> i128 {
        self.milli
    }

    /// In whole units, rounded away from zero (how memory and counts are compared).
    pub fn value(self) -> i128 {
        let whole = self.milli / 1000;
        match self.milli % 1000 {
            0 => whole,
            r if r > 0 => whole + 1,
            _ => whole - 1,
        }
    }
}

impl fmt::Display for Quantity {
    /// Whole units when exact, else thousandths (`2`, `1500m`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.milli % 1000 == 0 {
            write!(f, "{}", self.milli / 1000)
        } else {
            write!(f, "{}m", self.milli)
        }
    }
}

/// How a suffix scales the number in front of it.
enum Scale {
    /// Times ten to this power.
    Decimal(i32),
    /// Times 1024 to this power.
    Binary(u32),
}

fn suffix_scale(suffix: &str) -> Option<Scale> {
    let scale = match suffix {
        "" => Scale::Decimal(0),
        "n" => Scale::Decimal(-9),
        "u" => Scale::Decimal(-6),
        "m" => Scale::Decimal(-3),
        "k" => Scale::Decimal(3),
        "M" => Scale::Decimal(6),
        "G" => Scale::Decimal(9),
        "T" => Scale::Decimal(12),
        "P" => Scale::Decimal(15),
        "E" => Scale::Decimal(18),
        "Ki" => Scale::Binary(1),
        "Mi" => Scale::Binary(2),
        "Gi" => Scale::Binary(3),
        "Ti" => Scale::Binary(4),
        "Pi" => Scale::Binary(5),
        "Ei" => Scale::Binary(6),
        _ => {
            // A decimal exponent: `e3`, `E-2`, `e+6`.
            let rest = suffix.strip_prefix(['e', 'E'])?;
            let digits = rest.strip_prefix(['+', '-']).unwrap_or(rest);
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            Scale::Decimal(rest.parse().ok()?)
        }
    };
    Some(scale)
}

/// `n / d`, rounded away from zero (`n` is never negative here).
fn div_up(n: i128, d: i128) -> i128 {
    n / d + i128::from(n % d != 0)
}

impl FromStr for Quantity {
    type Err = Error;

    fn from_str(input: &str) -> Result<Self, Error> {
        let fail = |problem| Error {
            input: input.to_string(),
            problem,
        };
        let (negative, rest) = match input.as_bytes().first() {
            Some(b'-') => (true, &input[1..]),
            Some(b'+') => (false, &input[1..]),
            _ => (false, input),
        };
        let number_len = rest
            .bytes()
            .position(|b| !(b.is_ascii_digit() || b == b'.'))
            .unwrap_or(rest.len());
        let (number, suffix) = rest.split_at(number_len);
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        if whole.is_empty() && fraction.is_empty() {
            return Err(fail("expected a number"));
        }
        if fraction.contains('.') {
            return Err(fail("more than one decimal point"));
        }
        let scale = suffix_scale(suffix).ok_or_else(|| fail("unknown suffix"))?;
        // All the digits as one integer, and how many of them follow the point.
        let mut mantissa: i128 = 0;
        for b in whole.bytes().chain(fraction.bytes()) {
            mantissa = mantissa
                .checked_mul(10)
                .and_then(|m| m.checked_add(i128::from(b - b'0')))
                .ok_or_else(|| fail("too many digits"))?;
        }
        let fraction_digits = i32::try_from(fraction.len()).map_err(|_| fail("too many digits"))?;
        let too_large = || fail("too large");
        let milli = if mantissa == 0 {
            0
        } else {
            match scale {
                Scale::Decimal(exp) => {
                    // mantissa × 10^(exp + 3 − fraction digits)
                    let power = exp
                        .checked_add(3)
                        .and_then(|p| p.checked_sub(fraction_digits))
                        .ok_or_else(too_large)?;
                    if power >= 0 {
                        let factor = 10i128
                            .checked_pow(power.unsigned_abs())
                            .ok_or_else(too_large)?;
                        mantissa.checked_mul(factor).ok_or_else(too_large)?
                    } else {
                        match 10i128.checked_pow(power.unsigned_abs()) {
                            Some(divisor) => div_up(mantissa, divisor),
                            // Smaller than any divisor can express: the least step up.
                            None => 1,
                        }
                    }
                }
                Scale::Binary(k) => {
                    // mantissa × 1000 × 1024^k / 10^(fraction digits)
                    let factor = 1024i128
                        .checked_pow(k)
                        .and_then(|f| f.checked_mul(1000))
                        .ok_or_else(too_large)?;
                    let scaled = mantissa.checked_mul(factor).ok_or_else(too_large)?;
                    match 10i128.checked_pow(fraction_digits.unsigned_abs()) {
                        Some(divisor) => div_up(scaled, divisor),
                        None => 1,
                    }
                }
            }
        };
        Ok(Quantity {
            milli: if negative { -milli } else { milli },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Quantity {
        s.parse()
            .unwrap_or_else(|e| panic!("{s:?} should parse: {e}"))
    }

    #[test]
    fn cpu_forms_parse_to_millicores() {
        assert_eq!(q("100m").milli(), 100);
        assert_eq!(q("0.5").milli(), 500);
        assert_eq!(q(".5").milli(), 500);
        assert_eq!(q("1").milli(), 1000);
        assert_eq!(q("1.").milli(), 1000);
        assert_eq!(q("2.25").milli(), 2250);
        assert_eq!(q("+3").milli(), 3000);
        assert_eq!(q("0").milli(), 0);
        assert_eq!(q("0.0001").milli(), 1, "finer than a milli rounds up");
        assert_eq!(q("1n").milli(), 1);
        assert_eq!(q("1500u").milli(), 2);
        assert_eq!(q("250000000n").milli(), 250);
    }

    #[test]
    fn memory_forms_parse_to_bytes() {
        assert_eq!(q("128Mi").value(), 128 << 20);
        assert_eq!(q("1Gi").value(), 1 << 30);
        assert_eq!(q("1G").value(), 1_000_000_000);
        assert_eq!(q("1k").value(), 1000);
        assert_eq!(q("1Ki").value(), 1024);
        assert_eq!(q("1.5Gi").value(), 3 << 29);
        assert_eq!(q("0.5Ki").value(), 512);
        assert_eq!(q("1Ei").value(), 1 << 60);
        assert_eq!(q("2E").value(), 2_000_000_000_000_000_000);
        assert_eq!(q("1T").value(), 1_000_000_000_000);
        assert_eq!(q("1P").value(), 1_000_000_000_000_000);
        assert_eq!(q("1.5").value(), 2, "whole units round up");
    }

    #[test]
    fn decimal_exponents_parse() {
        assert_eq!(q("1e3").value(), 1000);
        assert_eq!(q("1E3").value(), 1000);
        assert_eq!(q("1e+3").value(), 1000);
        assert_eq!(q("5e-3").milli(), 5);
        assert_eq!(q("1.5e2").value(), 150);
        assert_eq!(q("1e-30").milli(), 1);
    }

    #[test]
    fn signs_and_ordering() {
        assert_eq!(q("-100m").milli(), -100);
        assert_eq!(q("-1.5").value(), -2);
        assert!(q("1Gi") > q("1G"));
        assert!(q("999m") < q("1"));
        assert_eq!(q("1000m"), q("1"));
    }

    #[test]
    fn nonsense_is_refused_with_the_input_named() {
        for bad in [
            "", "m", "Mi", "1.2.3", "1x", "1mi", "1MB", " 1", "1 ", "e3", "1e", "1e+", "1e3.5",
            "--1", "1Gi1", "1ee3",
        ] {
            let e = bad.parse::<Quantity>().unwrap_err();
            assert!(e.to_string().contains(&format!("{bad:?}")), "{e}");
        }
        let huge = "9".repeat(60);
        assert!(huge.parse::<Quantity>().is_err());
        assert!("1e40".parse::<Quantity>().is_err());
        assert!("100000000000000000000Ei".parse::<Quantity>().is_err());
        assert_eq!(q("0e99999"), Quantity::ZERO, "zero is zero at any scale");
    }

    #[test]
    fn display_is_units_or_millis() {
        assert_eq!(q("2").to_string(), "2");
        assert_eq!(q("1500m").to_string(), "1500m");
        assert_eq!(Quantity::from_units(3).milli(), 3000);
        assert_eq!(Quantity::from_milli(5).value(), 1);
    }
}
