//! Big work arrays backed by huge pages where the kernel allows it: with transparent huge pages in `madvise` mode
//! (the usual default), an array the program does not advise gets 4 KiB pages, and a 290k-node graph's arrays
//! then cost some 11k page faults and a TLB miss on most scattered reads.

/// The huge page size the advice aims at (x86-64 and aarch64 with 4 KiB base pages).
const HUGE_PAGE: usize = 2 << 20;

/// An empty Vec with room for `capacity` items, whose untouched room is advised to be backed by huge pages (only
/// the whole huge pages inside it; an array under two of them is left alone). The advice never changes what the
/// memory holds, and where it is refused (no THP, another OS) nothing changes at all.
pub(super) fn huge_vec<T>(capacity: usize) -> Vec<T> {
    let v = Vec::with_capacity(capacity);
    let bytes = v.capacity().saturating_mul(std::mem::size_of::<T>());
    if bytes >= 2 * HUGE_PAGE {
        advise(v.as_ptr() as usize, bytes);
    }
    v
}

#[cfg(target_os = "linux")]
fn advise(start: usize, bytes: usize) {
    let first = start.next_multiple_of(HUGE_PAGE);
    let end = (start + bytes) & !(HUGE_PAGE - 1);
    if end > first {
        // SAFETY: the range lies inside one live allocation that this process owns; MADV_HUGEPAGE only changes
        // how its pages are backed, never their contents, and a failure (EINVAL without THP) is harmless.
        unsafe { libc::madvise(first as *mut libc::c_void, end - first, libc::MADV_HUGEPAGE) };
    }
}

#[cfg(not(target_os = "linux"))]
fn advise(_start: usize, _bytes: usize) {}

#[cfg(test)]
mod tests {
    use super::huge_vec;

    #[test]
    fn an_advised_vec_is_an_ordinary_vec() {
        for capacity in [0, 1, 1000, 3 << 20] {
            let mut v: Vec<u64> = huge_vec(capacity);
            assert!(v.is_empty() && v.capacity() >= capacity);
            v.extend(0..capacity as u64);
            assert!(v.iter().enumerate().all(|(i, &x)| i as u64 == x));
        }
    }
}
