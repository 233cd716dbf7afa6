/* weft cluster: matrix products whose leading dimensions are not aligned
 * (docs/cost-model.md, "Plain PyTorch", "Unaligned products").
 *
 * The rule. cuBLAS runs a product on its fast tensor-core kernels only when
 * every matrix's leading dimension (and pointer) is a multiple of 16 bytes:
 * 8 elements in 16 bits, 4 in tf32, 16 in fp8 (cuBLAS documentation,
 * "Tensor Core Usage"; CUTLASS's kernels take the alignment as a template
 * parameter, kAlignmentA/B, and the generator instantiates the 16-byte ones
 * for sm80 and sm90). Otherwise it falls back to CUTLASS kernels instantiated
 * for alignment 1 (an H100 profile of GPT-2, whose vocabulary 50257 is odd,
 * shows cutlass_75_tensorop_f16_s1688gemm_f16_{128x128,256x128,128x256}
 * _{tn,nn,nt}_align1 for the head's three products:
 * tests/data/h100-pytorch-profile-2026-11-26.txt). Strict fp32 products run
 * on the vector unit (SIMT sgemm, PyTorch's default with TF32 off for
 * matmul), whose loads are one element wide anyway: no penalty.
 *
 * The fallback's rate, from how the kernel loads its operands (CUTLASS at
 * 7107b055, include/cutlass/gemm/threadblock/default_mma_core_sm75.h and
 * include/cutlass/transform/threadblock/predicated_tile_access_iterator.h):
 * the thread map stays the 128-bit one (kAccessSizeInBits = 128: each thread
 * owns 8 consecutive 16-bit elements, 4 threads along a K-contiguous row of
 * the tile and 8 rows per warp, or 8 threads along an M/N-contiguous row and
 * 4 rows), but with kAlignment = 1 the iterator splits each 16-byte vector
 * into kAccessesPerVector = 8 scalar loads. A warp's load instruction then
 * reads 32 elements, one per lane, the lanes 16 bytes apart, across 8 (or 4)
 * rows of the operand. The L1 resolves one 128-byte line of a warp
 * instruction per cycle (Nsight Compute's "wavefronts": the work of
 * different lines is serialized), so each instruction costs the lines it
 * touches: one per row, two where the row's span crosses a line boundary,
 * which at an unaligned leading dimension happens on about half the rows.
 * The K loop of a tile tm x tn then takes (tm lines(A) + tn lines(B)) / 32
 * cycles per K step, against which the tensor cores' work hides; the
 * epilogue stores C the same way, one element per lane. Tiles run one per SM
 * in waves; the fastest of the three tile shapes is taken, and never faster
 * than the aligned kernel would be. The SM clock is a device fact (table
 * below). Nothing here is fitted: the profile identified the kernels, and
 * docs/cost-model.md compares what this predicts with what it measured. */
#include "weft/cluster.h"

#include <math.h>
#include <string.h>

/* The SM clock the kernels run at, per device (the name a preset or a
 * measured file gives): NVIDIA's boost clocks, the H100's as nvidia-smi
 * reported it in tests/data/h100-kernels-2026-11.json ("1980 MHz"). */
static const struct {
    const char *name_has;
    double clock_hz;
} SM_CLOCK[] = {
    {"H100", 1980e6},
    {"H200", 1980e6},
    {"A100", 1410e6},
    {"V100", 1530e6},
};

static double sm_clock(const wf_device *d)
{
    for (size_t i = 0; i < sizeof SM_CLOCK / sizeof SM_CLOCK[0]; i++)
        if (strstr(d->name, SM_CLOCK[i].name_has))
            return SM_CLOCK[i].clock_hz;
    return 0;
}

static double elem_bytes(wf_gemm_kind kind)
{
    return kind == WF_GEMM_FP8 ? 1.0 : kind == WF_GEMM_HALF ? 2.0 : 4.0;
}

int wf_gemm_align_elems(wf_gemm_kind kind)
{
    /* 16 bytes of the kind's element; SIMT fp32 takes any. */
    return kind == WF_GEMM_FP32 ? 1 : (int)(16.0 / elem_bytes(kind));
}

static int ld_aligned(wf_gemm_kind kind, double ld)
{
    double a = (double)wf_gemm_align_elems(kind);
    return fmod(ld, a) == 0.0;
}

int wf_gemm_layout_aligned(wf_gemm_kind kind, const wf_gemm_layout *l)
{
    return ld_aligned(kind, l->lda) && ld_aligned(kind, l->ldb) && ld_aligned(kind, l->ldc);
}

void wf_gemm_linear_layouts(double in, double out, wf_gemm_layout pass[3])
{
    /* forward Y = X W^T: (tokens, out, in); X[tokens, in] and W[out, in]
     * both contiguous along K = in; Y[tokens, out] */
    pass[0] = (wf_gemm_layout){.a_kmajor = 1, .b_kmajor = 1, .lda = in, .ldb = in, .ldc = out};
    /* data gradient dX = dY W: (tokens, in, out); dY contiguous along
     * K = out, W[out, in] along N = in; dX[tokens, in] */
    pass[1] = (wf_gemm_layout){.a_kmajor = 1, .b_kmajor = 0, .lda = out, .ldb = in, .ldc = in};
    /* weight gradient as weft orients it, (in, out, tokens): X^T dY, X along
     * M = in, dY along N = out; the gradient W[out, in] */
    pass[2] = (wf_gemm_layout){.a_kmajor = 0, .b_kmajor = 0, .lda = in, .ldb = out, .ldc = in};
}

/* 128-byte lines one scalar warp load touches, averaged over the rows of an
 * operand of leading dimension ld: `rows` rows per instruction, `lanes`
 * lanes per row 16 bytes apart, each reading element v of its vector. */
static double lines_per_load(double ld, double eb, int rows, int lanes)
{
    const double line = 128.0;
    double pitch = fmod(ld * eb, line), sum = 0;
    const int R = 128; /* row offsets repeat within 128 rows */
    for (int r = 0; r < R; r++) {
        double o = fmod((double)r * pitch, line);
        for (int v = 0; v < 8; v++) {
            double first = o + v * eb, last = first + 16.0 * (lanes - 1) + eb - 1.0;
            sum += floor(last / line) - floor(first / line) + 1.0;
        }
    }
    return (double)rows * sum / (R * 8.0);
}

/* Lines of one scalar warp store of C: 32 lanes, one element each, along a
 * row of leading dimension ld (averaged over the rows). */
static double store_lines(double ld, double eb)
{
    const double line = 128.0;
    double pitch = fmod(ld * eb, line), sum = 0;
    for (int r = 0; r < 128; r++) {
        double first = fmod((double)r * pitch, line), last = first + 32.0 * eb - 1.0;
        sum += floor(last / line) + 1.0;
    }
    return sum / 128.0;
}

double wf_gemm_align1_time(const wf_device *d, wf_gemm_kind kind, double count, double M, double N, double K,
                           const wf_gemm_layout *l)
{
    double clock = sm_clock(d);
    if (kind == WF_GEMM_FP32 || !(clock > 0) || d->sms <= 0 || !(count > 0 && M > 0 && N > 0 && K > 0))
        return 0;
    const double eb = elem_bytes(kind);
    /* K-contiguous rows: 4 lanes x 16 bytes, 8 rows per warp; M/N-contiguous:
     * 8 lanes, 4 rows (the 128-bit thread map of default_mma_core_sm75.h). */
    double la = l->a_kmajor ? lines_per_load(l->lda, eb, 8, 4) : lines_per_load(l->lda, eb, 4, 8);
    double lb = l->b_kmajor ? lines_per_load(l->ldb, eb, 8, 4) : lines_per_load(l->ldb, eb, 4, 8);
    /* the epilogue: one element per lane, 32 lanes along a row of C */
    double lc = store_lines(l->ldc, eb);
    static const double TILES[][2] = {{128, 128}, {256, 128}, {128, 256}};
    double best = HUGE_VAL;
    for (int i = 0; i < 3; i++) {
        double tm = TILES[i][0], tn = TILES[i][1];
        double tiles = count * ceil(M / tm) * ceil(N / tn);
        double waves = ceil(tiles / (double)d->sms);
        double per_k = (tm * la + tn * lb) / 32.0;
        double epi = tm * tn / 32.0 * lc;
        double t = waves * (K * per_k + epi) / clock;
        if (t < best)
            best = t;
    }
    return best;
}
