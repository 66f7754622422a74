//! Random and mutated inputs for the parsers' no-panic tests: a fixed-seed xorshift generator (reproducible,
//! no extra crates) and mutations of valid inputs (bit flips, byte changes, cuts, duplicated spans), which reach
//! deeper into a parser than uniform noise.

pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    pub fn bytes(&mut self, max_len: usize) -> Vec<u8> {
        let len = self.below(max_len + 1);
        (0..len).map(|_| self.next() as u8).collect()
    }

    /// A copy of `seed` with a few random edits.
    pub fn mutate(&mut self, seed: &[u8]) -> Vec<u8> {
        let mut v = seed.to_vec();
        for _ in 0..1 + self.below(4) {
            match self.below(5) {
                0 if !v.is_empty() => {
                    let i = self.below(v.len());
                    v[i] ^= 1 << self.below(8);
                }
                1 if !v.is_empty() => {
                    let i = self.below(v.len());
                    v[i] = [0, 0xff, 0x7f, 0x80, b'\n', b' '][self.below(6)];
                }
                2 => v.truncate(self.below(v.len() + 1)),
                3 if !v.is_empty() => {
                    let a = self.below(v.len());
                    let b = a + self.below(v.len() - a);
                    let span = v[a..b].to_vec();
                    let at = self.below(v.len() + 1);
                    v.splice(at..at, span);
                }
                _ => {
                    let at = self.below(v.len() + 1);
                    let noise = self.bytes(16);
                    v.splice(at..at, noise);
                }
            }
        }
        v
    }

    /// `n` inputs: pure noise and mutations of each seed.
    pub fn inputs(&mut self, seeds: &[&[u8]], n: usize) -> Vec<Vec<u8>> {
        (0..n)
            .map(|i| if seeds.is_empty() || i % 4 == 0 { self.bytes(256) } else { self.mutate(seeds[i % seeds.len()]) })
            .collect()
    }
}
