//! Prices of GPU-time per type and future round, rising with what is
//! already committed: `p = L_w * (U/L)^(g/c)` (the exponential price of
//! online primal-dual schedulers), `g` the committed GPUs, `c` the capacity.

/// Committed GPUs and prices over the planning horizon.
#[derive(Debug, Clone)]
pub struct PriceGrid {
    /// Types.
    k: usize,
    /// Rounds planned ahead.
    horizon: usize,
    /// GPUs of each type.
    capacity: Vec<u32>,
    /// `used[t * k + w]`: GPUs of type `w` committed in future round `t`.
    used: Vec<u32>,
    /// Price of an idle GPU-second of each type (`L_w`).
    base: Vec<f64>,
    /// `U / L`: how much a full type costs over an idle one.
    ratio: f64,
}

impl PriceGrid {
    /// An empty grid.
    pub fn new(capacity: Vec<u32>, horizon: usize, base: Vec<f64>, ratio: f64) -> Self {
        let k = capacity.len();
        Self {
            k,
            horizon,
            used: vec![0; horizon * k],
            capacity,
            base,
            ratio,
        }
    }

    /// Rounds planned ahead.
    pub fn horizon(&self) -> usize {
        self.horizon
    }

    /// Free GPUs of type `w` in round `t`.
    pub fn free(&self, t: usize, w: usize) -> u32 {
        self.capacity[w] - self.used[t * self.k + w]
    }

    /// Price of one more GPU-second of type `w` in round `t`.
    pub fn price(&self, t: usize, w: usize) -> f64 {
        let c = self.capacity[w];
        if c == 0 {
            return f64::INFINITY;
        }
        let g = f64::from(self.used[t * self.k + w]) / f64::from(c);
        self.base[w] * self.ratio.powf(g)
    }

    /// Price of an idle GPU of type `w`.
    pub fn base(&self, w: usize) -> f64 {
        self.base[w]
    }

    /// The factor by which one more committed GPU of type `w` raises its price.
    pub fn price_step(&self, w: usize) -> f64 {
        self.ratio.powf(1.0 / f64::from(self.capacity[w].max(1)))
    }

    /// Commits `n` GPUs of type `w` in round `t`.
    pub fn commit(&mut self, t: usize, w: usize, n: u32) {
        let u = &mut self.used[t * self.k + w];
        *u += n;
        debug_assert!(*u <= self.capacity[w]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prices_rise_exponentially_with_commitment() {
        // 4 GPUs, idle price 1, full price 16: each GPU committed doubles it.
        let mut g = PriceGrid::new(vec![4], 2, vec![1.0], 16.0);
        assert_eq!(g.price(0, 0), 1.0);
        g.commit(0, 0, 1);
        assert!((g.price(0, 0) - 2.0).abs() < 1e-12);
        g.commit(0, 0, 3);
        assert!((g.price(0, 0) - 16.0).abs() < 1e-12);
        assert_eq!(g.free(0, 0), 0);
        // Other rounds are untouched.
        assert_eq!(g.price(1, 0), 1.0);
        assert_eq!(g.free(1, 0), 4);
    }
}
