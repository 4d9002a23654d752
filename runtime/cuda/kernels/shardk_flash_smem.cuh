/* runtime/cuda/kernels/shardk_flash_smem.cuh — the dynamic shared memory of the tensor-core attention
 * kernels (shardk_flash.cuh): what each kernel takes (it asks the launch for that many bytes and fails
 * when the launch gave fewer) and what the compiler's launches give (codegen/cuda_flash_cfg.c). Plain
 * C macros, the one place for both: constant expressions in the kernels' C++ and in the compiler's C.
 *
 * A tile of R rows of HD bf16 is stored row-major with rows padded by 8 elements (the 8 rows of an
 * ldmatrix fall in different banks): 2 R (HD + 8) bytes, a multiple of 16 as HD is of 16. In order:
 *   forward and dQ: K tiles [2] and V tiles [2] of BT keys (double-buffered); with RS the block's
 *     16 MT W query rows of Q (dQ: and of dO) resident, the left operand of the score products read by
 *     ldmatrix instead of kept in registers;
 *   dK/dV: Q tiles [2] and dO tiles [2] of BT queries, then lse [2][BT] and D [2][BT] (f32); with RS the
 *     block's 16 MT W key rows of K and of V resident.
 * RS is 0 or 1. */
#ifndef SHARDK_FLASH_SMEM_CUH
#define SHARDK_FLASH_SMEM_CUH

#define SK_FLASH_TILE_BYTES(R, HD) (2 * (R) * ((HD) + 8))
/* forward (resident: Q) */
#define SK_FLASH_SMEM_FWD(BT, HD, MT, W, RS)                                                                          \
  (4 * SK_FLASH_TILE_BYTES(BT, HD) + (RS) * SK_FLASH_TILE_BYTES(16 * (MT) * (W), HD))
/* dQ (resident: Q and dO) */
#define SK_FLASH_SMEM_Q(BT, HD, MT, W, RS)                                                                            \
  (4 * SK_FLASH_TILE_BYTES(BT, HD) + 2 * (RS) * SK_FLASH_TILE_BYTES(16 * (MT) * (W), HD))
/* dK/dV (resident: K and V) */
#define SK_FLASH_SMEM_KV(BT, HD, MT, W, RS)                                                                           \
  (4 * SK_FLASH_TILE_BYTES(BT, HD) + 16 * (BT) + 2 * (RS) * SK_FLASH_TILE_BYTES(16 * (MT) * (W), HD))
/* the most a block may have on the GPUs the compiler targets (sm_90: 227 KiB with the opt-in
 * attribute; sm_80 163 KiB, sm_86 / sm_89 99 KiB: a candidate above those is not one there) */
#define SK_FLASH_SMEM_MAX (227 * 1024)

#endif
