//! Python's `random.Random`, draw for draw.
//!
//! Gavel's generators draw from CPython's Mersenne Twister. Giving the
//! same draws from the same seeds is what lets `hadar trace generate
//! --seed 0` produce Gavel's own traces (the static runs A and B byte for
//! byte, and the continuous-arrival workload its simulator generated for
//! the figures we compare against), so that our numbers and Gavel's are
//! measured on one workload, not two samples of one distribution.
//!
//! Only the calls Gavel's generators make are here: `seed(int)`,
//! `random()`, `uniform(a, b)` and `choice(seq)` (through `_randbelow`).
//! The generator itself is `rand_mt`'s MT19937; this module adds CPython's
//! seeding and its conversions, which `tests` pin against values printed
//! by CPython 3.11.

use rand_mt::Mt;

/// A `random.Random()` seeded with `seed(n)`.
#[derive(Clone)]
pub struct PyRandom {
    mt: Mt,
}

impl std::fmt::Debug for PyRandom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PyRandom").finish_non_exhaustive()
    }
}

impl PyRandom {
    /// `random.Random().seed(seed)`: CPython hands the integer's 32-bit
    /// words, least significant first, to MT19937's `init_by_array`; zero
    /// is the one-word key `[0]`.
    pub fn new(seed: u64) -> Self {
        let low = seed as u32;
        let high = (seed >> 32) as u32;
        let mt = if high == 0 {
            Mt::new_with_key([low])
        } else {
            Mt::new_with_key([low, high])
        };
        Self { mt }
    }

    /// `random()`: a double in [0, 1) from 53 random bits
    /// (`genrand_res53`: 27 bits of one word, 26 of the next).
    pub fn random(&mut self) -> f64 {
        let a = f64::from(self.mt.next_u32() >> 5);
        let b = f64::from(self.mt.next_u32() >> 6);
        (a * 67_108_864.0 + b) * (1.0 / 9_007_199_254_740_992.0)
    }

    /// `uniform(a, b)`: `a + (b - a) * random()`.
    pub fn uniform(&mut self, a: f64, b: f64) -> f64 {
        a + (b - a) * self.random()
    }

    /// `_randbelow(n)`: a uniform integer in `0..n` by rejection from
    /// `getrandbits(n.bit_length())`, the draw behind `choice(seq)`.
    ///
    /// # Panics
    /// If `n` is 0 or does not fit in 32 bits (Gavel's lists are short).
    pub fn below(&mut self, n: usize) -> usize {
        let n = u32::try_from(n).expect("PyRandom::below takes n < 2^32");
        assert!(n > 0, "PyRandom::below(0)");
        let bits = u32::BITS - n.leading_zeros();
        loop {
            // getrandbits(k) for k <= 32: the top k bits of one word.
            let r = self.mt.next_u32() >> (32 - bits);
            if r < n {
                return r as usize;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Every expected value below was printed by CPython 3.11.7, e.g.
    // `r = random.Random(); r.seed(2); [r.random() for _ in range(3)]`.

    #[test]
    fn random_matches_cpython() {
        let mut r = PyRandom::new(2);
        assert_eq!(r.random(), 0.9560342718892494);
        assert_eq!(r.random(), 0.9478274870593494);
        assert_eq!(r.random(), 0.05655136772680869);
    }

    #[test]
    fn seeds_zero_and_wide_match_cpython() {
        // seed(0) is the key [0], not an empty key.
        let mut r = PyRandom::new(0);
        assert_eq!(r.random(), 0.8444218515250481);
        // A seed over 32 bits is two key words.
        let mut r = PyRandom::new(1 << 40 | 7);
        assert_eq!(r.random(), 0.6137037779936511);
    }

    #[test]
    fn uniform_and_below_match_cpython() {
        // r.seed(3); r.uniform(1.5, 3); [r.randrange(26) for _ in range(8)]
        let mut r = PyRandom::new(3);
        assert_eq!(r.uniform(1.5, 3.0), 1.8569469406378372);
        let draws: Vec<usize> = (0..8).map(|_| r.below(26)).collect();
        assert_eq!(draws, [17, 4, 11, 19, 15, 20, 18, 2]);
        // n = 1 takes one word and always answers 0, as CPython's.
        assert_eq!(r.below(1), 0);
    }
}
