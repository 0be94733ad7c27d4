//! The shapes of a 2-D convolution as cuDNN's legacy API takes them (`cudnn.rs`): 32-bit
//! dimensions and strides, the output size, and which layouts it reads without a copy. Kept
//! apart from the library calls so that they are tested without a device.

use burn_backend::ops::ConvOptions;

/// A 4-D tensor as cuDNN reads it: dimensions (N, C, H, W) and element strides.
pub(crate) type Layout = ([i32; 4], [i32; 4]);

/// Stride, padding, dilation and group count as cuDNN takes them.
#[derive(Clone, Copy)]
pub(crate) struct Params {
    pub stride: [i32; 2],
    pub padding: [i32; 2],
    pub dilation: [i32; 2],
    pub groups: i32,
}

impl Params {
    pub fn of(options: &ConvOptions<2>) -> Option<Self> {
        let pair = |v: [usize; 2]| -> Option<[i32; 2]> {
            Some([i32::try_from(v[0]).ok()?, i32::try_from(v[1]).ok()?])
        };
        let params = Self {
            stride: pair(options.stride)?,
            padding: pair(options.padding)?,
            dilation: pair(options.dilation)?,
            groups: i32::try_from(options.groups).ok()?,
        };
        let positive = params
            .stride
            .iter()
            .chain(&params.dilation)
            .all(|&v| v >= 1);
        (positive && params.groups >= 1).then_some(params)
    }

    /// The output dimensions of a convolution of `x` by the filter `w` (Burn's and cuDNN's:
    /// `(in + 2p - d(k - 1) - 1) / s + 1` per spatial dimension), if the channels agree with
    /// the group count.
    pub fn output(&self, x: [i32; 4], w: [i32; 4]) -> Option<[i32; 4]> {
        let [n, c, h, wd] = x.map(i64::from);
        let [k, cg, kh, kw] = w.map(i64::from);
        let groups = i64::from(self.groups);
        if c != cg * groups || k % groups != 0 {
            return None;
        }
        let spatial = |size: i64, kernel: i64, i: usize| -> Option<i32> {
            let padded = size + 2 * i64::from(self.padding[i]);
            let span = i64::from(self.dilation[i]) * (kernel - 1) + 1;
            if padded < span {
                return None;
            }
            i32::try_from((padded - span) / i64::from(self.stride[i]) + 1).ok()
        };
        Some([
            i32::try_from(n).ok()?,
            i32::try_from(k).ok()?,
            spatial(h, kh, 0)?,
            spatial(wd, kw, 1)?,
        ])
    }
}

/// `shape` as cuDNN's 4-D dimensions: rank 4, no empty dimension, and fewer than 2³¹
/// elements (the legacy API indexes with 32-bit integers).
pub(crate) fn dims4(shape: &[usize]) -> Option<[i32; 4]> {
    let dims: [usize; 4] = shape.try_into().ok()?;
    let elements = dims.iter().try_fold(1usize, |n, &d| n.checked_mul(d))?;
    if dims.contains(&0) || elements > i32::MAX as usize {
        return None;
    }
    Some(dims.map(|d| d as i32))
}

/// The strides of `dims` packed in NCHW order, or in NHWC order.
pub(crate) fn packed([_, c, h, w]: [i32; 4], nhwc: bool) -> [i32; 4] {
    if nhwc {
        [h * w * c, 1, w * c, c]
    } else {
        [c * h * w, h * w, w, 1]
    }
}

/// The layout of a tensor of `shape` and `strides` if it is dense in NCHW or NHWC order (the
/// NHWC one: burn-cubecl's own convolutions return such views). A dimension of size 1 may have
/// any stride (it multiplies no index): cuDNN is given the packed one.
pub(crate) fn dense_layout(shape: &[usize], strides: &[usize]) -> Option<Layout> {
    let dims = dims4(shape)?;
    if strides.len() != 4 {
        return None;
    }
    [false, true].into_iter().find_map(|nhwc| {
        let p = packed(dims, nhwc);
        let fits = (0..4).all(|i| dims[i] == 1 || strides[i] == p[i] as usize);
        fits.then_some((dims, p))
    })
}

/// Whether a layout keeps its channels innermost (NHWC order), not also NCHW (one channel, or
/// one pixel, reads the same in both).
pub(crate) fn channels_last((dims, strides): Layout) -> bool {
    // A dimension of size 1 may have any stride (it multiplies no index).
    let fits = |p: [i32; 4]| (0..4).all(|i| dims[i] == 1 || strides[i] == p[i]);
    fits(packed(dims, true)) && !fits(packed(dims, false))
}

/// For a filter gradient, which of x and dy to read as a packed NCHW copy (`(x, dy)`) so that
/// both are in one order: cuDNN has no filter-gradient algorithm for an NHWC x (burn-cubecl's
/// convolutions return such views) with an NCHW dy — every algorithm "not supported" on W3's
/// 1×1 convolutions (BENCHMARKS.md) — and the converse is not assumed to fare better.
pub(crate) fn filter_copies(x: Layout, dy: Layout) -> (bool, bool) {
    match (channels_last(x), channels_last(dy)) {
        (true, false) => (true, false),
        (false, true) => (false, true),
        _ => (false, false),
    }
}

/// The passes `BURN_COMPILE_CUDNN_PASSES` leaves to cuDNN (a diagnostic: unset, all three),
/// from a comma-separated list of `forward`, `data` and `filter`; the others run on the inner
/// backend. With it a difference from eager is traced to one kind of pass in a few runs.
pub(crate) fn passes_from(list: Option<&str>) -> Result<[bool; 3], String> {
    let Some(list) = list else {
        return Ok([true; 3]);
    };
    let mut taken = [false; 3];
    for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        match name {
            "forward" => taken[0] = true,
            "data" => taken[1] = true,
            "filter" => taken[2] = true,
            other => {
                return Err(format!(
                    "BURN_COMPILE_CUDNN_PASSES: unknown pass `{other}` (expected a \
                     comma-separated list of forward, data, filter)"
                ));
            }
        }
    }
    Ok(taken)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cudnn_passes_list_names_forward_data_and_filter() {
        assert_eq!(passes_from(None), Ok([true; 3]));
        assert_eq!(passes_from(Some("forward")), Ok([true, false, false]));
        assert_eq!(passes_from(Some("data, filter")), Ok([false, true, true]));
        assert_eq!(passes_from(Some("")), Ok([false; 3]));
        let err = passes_from(Some("forward,backward")).unwrap_err();
        assert!(err.contains("`backward`"), "{err}");
    }

    #[test]
    fn a_filter_gradient_reads_x_and_dy_in_one_order() {
        // W3's refused call: x an NHWC view of [64, 64, 56, 56], dy packed NCHW.
        let dims = [64, 64, 56, 56];
        let (nchw, nhwc) = ((dims, packed(dims, false)), (dims, packed(dims, true)));
        assert_eq!(nhwc.1, [200704, 1, 3584, 64]);
        assert!(channels_last(nhwc) && !channels_last(nchw));
        assert_eq!(filter_copies(nhwc, nchw), (true, false));
        assert_eq!(filter_copies(nchw, nhwc), (false, true));
        assert_eq!(filter_copies(nchw, nchw), (false, false));
        assert_eq!(filter_copies(nhwc, nhwc), (false, false));
        // One channel: NHWC and NCHW are the same strides, nothing to copy.
        let one = [64, 1, 8, 8];
        assert!(!channels_last((one, packed(one, true))));
        assert_eq!(
            filter_copies((one, packed(one, true)), nchw),
            (false, false)
        );
    }

    fn params(stride: usize, padding: usize, dilation: usize, groups: usize) -> Params {
        Params::of(&ConvOptions::new(
            [stride; 2],
            [padding; 2],
            [dilation; 2],
            groups,
        ))
        .unwrap()
    }

    #[test]
    fn output_sizes_follow_burns_formula() {
        // ResNet-50's stem: 7×7, stride 2, padding 3 on 224² → 112².
        let p = params(2, 3, 1, 1);
        assert_eq!(
            p.output([64, 3, 224, 224], [64, 3, 7, 7]),
            Some([64, 64, 112, 112])
        );
        // A stride that leaves a remainder rounds down: (7 + 2 - 3) / 2 + 1 = 4.
        assert_eq!(
            params(2, 1, 1, 1).output([1, 8, 7, 7], [8, 8, 3, 3]),
            Some([1, 8, 4, 4])
        );
        // Dilation 2 widens a 3×3 kernel to 5: padding 2 keeps the size.
        assert_eq!(
            params(1, 2, 2, 1).output([2, 16, 6, 6], [8, 16, 3, 3]),
            Some([2, 8, 6, 6])
        );
        // Two groups: each output channel reads 8 of the 16 inputs.
        assert_eq!(
            params(1, 1, 1, 2).output([2, 16, 6, 6], [16, 8, 3, 3]),
            Some([2, 16, 6, 6])
        );
    }

    #[test]
    fn inconsistent_convolutions_are_not_taken() {
        // Channels that disagree with the groups, output channels not divisible by them.
        assert_eq!(
            params(1, 1, 1, 2).output([2, 16, 6, 6], [16, 16, 3, 3]),
            None
        );
        assert_eq!(
            params(1, 1, 1, 2).output([2, 16, 6, 6], [15, 8, 3, 3]),
            None
        );
        // A kernel wider than the padded input.
        assert_eq!(params(1, 0, 1, 1).output([1, 1, 2, 2], [1, 1, 3, 3]), None);
        // Stride 0 and group count 0 are not convolutions (Burn's constructor refuses them; the
        // fields are public).
        let options = |stride: [usize; 2], groups| ConvOptions {
            stride,
            padding: [0; 2],
            dilation: [1; 2],
            groups,
        };
        assert!(Params::of(&options([0, 1], 1)).is_none());
        assert!(Params::of(&options([1, 1], 0)).is_none());
        assert!(Params::of(&options([1, 1], 1)).is_some());
    }

    #[test]
    fn dimensions_must_fit_the_legacy_apis_integers() {
        assert_eq!(dims4(&[2, 3, 4, 5]), Some([2, 3, 4, 5]));
        assert_eq!(dims4(&[2, 3, 4]), None, "rank 4 only");
        assert_eq!(dims4(&[2, 0, 4, 5]), None, "no empty dimension");
        assert_eq!(
            dims4(&[1 << 16, 1 << 16, 1, 1]),
            None,
            "2³¹ elements or more"
        );
    }

    #[test]
    fn dense_nchw_and_nhwc_views_are_read_in_place() {
        let shape = [2, 3, 4, 5];
        assert_eq!(
            dense_layout(&shape, &[60, 20, 5, 1]),
            Some(([2, 3, 4, 5], [60, 20, 5, 1]))
        );
        // An NHWC tensor viewed as NCHW (burn-cubecl's convolution outputs).
        assert_eq!(
            dense_layout(&shape, &[60, 1, 15, 3]),
            Some(([2, 3, 4, 5], [60, 1, 15, 3]))
        );
        // A batch of one: its stride is free, cuDNN gets the packed one.
        assert_eq!(
            dense_layout(&[1, 3, 4, 5], &[999, 20, 5, 1]),
            Some(([1, 3, 4, 5], [60, 20, 5, 1]))
        );
        // Transposed spatial dimensions, a sliced channel range: copied first.
        assert_eq!(dense_layout(&shape, &[60, 20, 1, 4]), None);
        assert_eq!(dense_layout(&shape, &[120, 20, 5, 1]), None);
    }
}
