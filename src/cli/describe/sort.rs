//! Go's `sort.Sort`, ported step for step: kubectl's order of equal elements is whatever
//! this unstable sort leaves.

/// Go's `sort.Sort` and `sort.Slice` (pattern-defeating quicksort), ported step for step:
/// they are not stable, and kubectl's order of equal elements (events of the same second,
/// tolerations with one key) is whatever this algorithm leaves.
pub(super) fn go_sort<T>(data: &mut [T], less: impl Fn(&T, &T) -> bool) {
    let n = data.len();
    if n <= 1 {
        return;
    }
    let limit = usize::BITS - n.leading_zeros();
    let mut s = GoSorter { data, less };
    s.pdqsort(0, n, limit);
}

struct GoSorter<'a, T, F> {
    data: &'a mut [T],
    less: F,
}

#[derive(PartialEq, Eq, Clone, Copy)]
enum SortedHint {
    Unknown,
    Increasing,
    Decreasing,
}

impl<T, F: Fn(&T, &T) -> bool> GoSorter<'_, T, F> {
    fn less(&self, i: usize, j: usize) -> bool {
        (self.less)(&self.data[i], &self.data[j])
    }

    fn swap(&mut self, i: usize, j: usize) {
        self.data.swap(i, j);
    }

    fn insertion_sort(&mut self, a: usize, b: usize) {
        for i in a + 1..b {
            let mut j = i;
            while j > a && self.less(j, j - 1) {
                self.swap(j, j - 1);
                j -= 1;
            }
        }
    }

    fn sift_down(&mut self, lo: usize, hi: usize, first: usize) {
        let mut root = lo;
        loop {
            let mut child = 2 * root + 1;
            if child >= hi {
                return;
            }
            if child + 1 < hi && self.less(first + child, first + child + 1) {
                child += 1;
            }
            if !self.less(first + root, first + child) {
                return;
            }
            self.swap(first + root, first + child);
            root = child;
        }
    }

    fn heap_sort(&mut self, a: usize, b: usize) {
        let (first, lo, hi) = (a, 0, b - a);
        for i in (0..=(hi - 1) / 2).rev() {
            self.sift_down(i, hi, first);
        }
        for i in (0..hi).rev() {
            self.swap(first, first + i);
            self.sift_down(lo, i, first);
        }
    }

    fn pdqsort(&mut self, mut a: usize, mut b: usize, mut limit: u32) {
        const MAX_INSERTION: usize = 12;
        let (mut was_balanced, mut was_partitioned) = (true, true);
        loop {
            let length = b - a;
            if length <= MAX_INSERTION {
                self.insertion_sort(a, b);
                return;
            }
            if limit == 0 {
                self.heap_sort(a, b);
                return;
            }
            if !was_balanced {
                self.break_patterns(a, b);
                limit -= 1;
            }
            let (mut pivot, mut hint) = self.choose_pivot(a, b);
            if hint == SortedHint::Decreasing {
                self.reverse_range(a, b);
                pivot = (b - 1) - (pivot - a);
                hint = SortedHint::Increasing;
            }
            if was_balanced
                && was_partitioned
                && hint == SortedHint::Increasing
                && self.partial_insertion_sort(a, b)
            {
                return;
            }
            if a > 0 && !self.less(a - 1, pivot) {
                a = self.partition_equal(a, b, pivot);
                continue;
            }
            let (mid, already) = self.partition(a, b, pivot);
            was_partitioned = already;
            let (left, right) = (mid - a, b - mid);
            let threshold = length / 8;
            if left < right {
                was_balanced = left >= threshold;
                self.pdqsort(a, mid, limit);
                a = mid + 1;
            } else {
                was_balanced = right >= threshold;
                self.pdqsort(mid + 1, b, limit);
                b = mid;
            }
        }
    }

    fn partition(&mut self, a: usize, b: usize, pivot: usize) -> (usize, bool) {
        self.swap(a, pivot);
        let (mut i, mut j) = (a as isize + 1, b as isize - 1);
        let at = |x: isize| x as usize;
        while i <= j && self.less(at(i), a) {
            i += 1;
        }
        while i <= j && !self.less(at(j), a) {
            j -= 1;
        }
        if i > j {
            self.swap(at(j), a);
            return (at(j), true);
        }
        self.swap(at(i), at(j));
        i += 1;
        j -= 1;
        loop {
            while i <= j && self.less(at(i), a) {
                i += 1;
            }
            while i <= j && !self.less(at(j), a) {
                j -= 1;
            }
            if i > j {
                break;
            }
            self.swap(at(i), at(j));
            i += 1;
            j -= 1;
        }
        self.swap(at(j), a);
        (at(j), false)
    }

    fn partition_equal(&mut self, a: usize, b: usize, pivot: usize) -> usize {
        self.swap(a, pivot);
        let (mut i, mut j) = (a as isize + 1, b as isize - 1);
        let at = |x: isize| x as usize;
        loop {
            while i <= j && !self.less(a, at(i)) {
                i += 1;
            }
            while i <= j && self.less(a, at(j)) {
                j -= 1;
            }
            if i > j {
                break;
            }
            self.swap(at(i), at(j));
            i += 1;
            j -= 1;
        }
        at(i)
    }

    fn partial_insertion_sort(&mut self, a: usize, b: usize) -> bool {
        const MAX_STEPS: usize = 5;
        const SHORTEST_SHIFTING: usize = 50;
        let mut i = a + 1;
        for _ in 0..MAX_STEPS {
            while i < b && !self.less(i, i - 1) {
                i += 1;
            }
            if i == b {
                return true;
            }
            if b - a < SHORTEST_SHIFTING {
                return false;
            }
            self.swap(i, i - 1);
            if i - a >= 2 {
                let mut j = i - 1;
                while j >= 1 {
                    if !self.less(j, j - 1) {
                        break;
                    }
                    self.swap(j, j - 1);
                    j -= 1;
                }
            }
            if b - i >= 2 {
                let mut j = i + 1;
                while j < b {
                    if !self.less(j, j - 1) {
                        break;
                    }
                    self.swap(j, j - 1);
                    j += 1;
                }
            }
        }
        false
    }

    fn break_patterns(&mut self, a: usize, b: usize) {
        let length = b - a;
        if length >= 8 {
            let mut random = length as u64;
            let modulus = 1usize << (usize::BITS - length.leading_zeros());
            let start = a + (length / 4) * 2 - 1;
            for idx in start..=start + 2 {
                random ^= random << 13;
                random ^= random >> 17;
                random ^= random << 5;
                let mut other = (random as usize) & (modulus - 1);
                if other >= length {
                    other -= length;
                }
                self.swap(idx, a + other);
            }
        }
    }

    fn choose_pivot(&mut self, a: usize, b: usize) -> (usize, SortedHint) {
        const SHORTEST_NINTHER: usize = 50;
        const MAX_SWAPS: usize = 4 * 3;
        let l = b - a;
        let mut swaps = 0;
        let (mut i, mut j, mut k) = (a + l / 4, a + l / 4 * 2, a + l / 4 * 3);
        if l >= 8 {
            if l >= SHORTEST_NINTHER {
                i = self.median(i - 1, i, i + 1, &mut swaps);
                j = self.median(j - 1, j, j + 1, &mut swaps);
                k = self.median(k - 1, k, k + 1, &mut swaps);
            }
            j = self.median(i, j, k, &mut swaps);
        }
        match swaps {
            0 => (j, SortedHint::Increasing),
            MAX_SWAPS => (j, SortedHint::Decreasing),
            _ => (j, SortedHint::Unknown),
        }
    }

    fn order2(&self, a: usize, b: usize, swaps: &mut usize) -> (usize, usize) {
        if self.less(b, a) {
            *swaps += 1;
            (b, a)
        } else {
            (a, b)
        }
    }

    fn median(&self, a: usize, b: usize, c: usize, swaps: &mut usize) -> usize {
        let (a, b) = self.order2(a, b, swaps);
        let (b, c) = self.order2(b, c, swaps);
        let _ = c;
        let (_a, b) = self.order2(a, b, swaps);
        b
    }

    fn reverse_range(&mut self, a: usize, b: usize) {
        let (mut i, mut j) = (a, b - 1);
        while i < j {
            self.swap(i, j);
            i += 1;
            j -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_sort_sorts_like_any_sort_apart_from_ties() {
        let mut v: Vec<u32> = (0..500).map(|i| (i * 7919 + 13) % 101).collect();
        let mut want = v.clone();
        want.sort();
        go_sort(&mut v, |a, b| a < b);
        assert_eq!(v, want);
        let mut desc: Vec<u32> = (0..300).rev().collect();
        go_sort(&mut desc, |a, b| a < b);
        assert_eq!(desc, (0..300).collect::<Vec<_>>());
    }
}
