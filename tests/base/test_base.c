/* tests/base/test_base.c - status strings, error messages, allocation hooks,
 * half-precision conversion. */
#include "engine/base.h"

#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

Test(base_status, every_code_has_text)
{
    for (int c = 0; c < GS_STATUS_COUNT; c++)
        cr_assert(strlen(gs_status_str((enum gs_status)c)) > 0);
    cr_assert_str_eq(gs_status_str((enum gs_status)999), "unknown status");
}

Test(base_err, set_and_prefix_compose_messages)
{
    struct gs_err err;
    gs_err_clear(&err);
    cr_assert_eq(gs_err_set(&err, GS_FORMAT, "tensor '%s': bad", "x"), GS_FORMAT);
    gs_err_prefix(&err, "file %d", 3);
    cr_assert_str_eq(err.msg, "file 3: tensor 'x': bad");
    cr_assert_eq(err.code, GS_FORMAT);
    cr_assert_eq(gs_err_set(NULL, GS_IO, "ignored"), GS_IO);
}

Test(base_alloc, fail_after_n_then_recovers)
{
    gs_alloc_fail_after(1);
    void *a = gs_malloc(8);
    void *b = gs_malloc(8);
    gs_alloc_fail_after(-1);
    void *c = gs_malloc(8);
    cr_assert_not_null(a);
    cr_assert_null(b);
    cr_assert_not_null(c);
    gs_free(a);
    gs_free(c);
    cr_assert_null(gs_calloc(SIZE_MAX / 2, 4), "calloc must catch n*size overflow");
    cr_assert_null(gs_alloc_array(SIZE_MAX / 2, 4));
}

/* Page allocations, small and large (mapped on a huge-page boundary): zeroed,
 * writable to the last byte, and subject to the failure hook. */
Test(base_alloc, pages_are_zeroed_writable_and_hookable)
{
    static const size_t sizes[] = {1, 4096, ((size_t)2 << 20) + 123, (size_t)5 << 20};
    for (size_t i = 0; i < GS_ARRAY_LEN(sizes); i++) {
        unsigned char *p = gs_alloc_pages(sizes[i]);
        cr_assert_not_null(p, "%zu bytes", sizes[i]);
        if (sizes[i] >= ((size_t)2 << 20))
            cr_assert_eq((uintptr_t)p % ((uintptr_t)2 << 20), 0, "large buffers start on 2 MiB");
        for (size_t j = 0; j < sizes[i]; j += 997)
            cr_assert_eq(p[j], 0);
        cr_assert_eq(p[sizes[i] - 1], 0);
        memset(p, 0xab, sizes[i]);
        cr_assert_eq(p[sizes[i] - 1], 0xab);
        gs_free_pages(p, sizes[i]);
    }
    gs_free_pages(NULL, 1);
    gs_alloc_fail_after(0);
    void *f = gs_alloc_pages((size_t)4 << 20);
    gs_alloc_fail_after(-1);
    cr_assert_null(f);
}

/* Every half value converts to float and back to itself (NaNs stay NaN). */
Test(base_fp16, all_halves_round_trip)
{
    for (uint32_t h = 0; h < 0x10000; h++) {
        float f = gs_fp16_to_f32((uint16_t)h);
        uint16_t back = gs_f32_to_fp16(f);
        if (isnan(f))
            cr_assert(isnan(gs_fp16_to_f32(back)));
        else
            cr_assert_eq(back, h, "half 0x%04x -> %g -> 0x%04x", h, f, back);
    }
}

Test(base_fp16, rounds_to_nearest_even_and_overflows_to_inf)
{
    cr_assert_eq(gs_f32_to_fp16(1.0f), 0x3c00);
    cr_assert_eq(gs_f32_to_fp16(65504.0f), 0x7bff);
    cr_assert_eq(gs_f32_to_fp16(65520.0f), 0x7c00);
    cr_assert_eq(gs_f32_to_fp16(-1e9f), 0xfc00);
    /* 1 + 2^-11 is exactly halfway between 1 and 1 + 2^-10: ties to even (1). */
    cr_assert_eq(gs_f32_to_fp16(1.0f + 0x1p-11f), 0x3c00);
    cr_assert_eq(gs_f32_to_fp16(1.0f + 3 * 0x1p-11f), 0x3c02);
    cr_assert_eq(gs_f32_to_fp16(0x1p-24f), 0x0001); /* smallest subnormal */
    cr_assert_eq(gs_f32_to_fp16(0x1p-26f), 0x0000); /* below half of it */
    cr_assert_float_eq(gs_fp16_to_f32(0x0001), 0x1p-24f, 0);
}

Test(base_bf16, round_trip_and_rounding)
{
    for (uint32_t h = 0; h < 0x10000; h += 7) {
        float f = gs_bf16_to_f32((uint16_t)h);
        if (!isnan(f))
            cr_assert_eq(gs_f32_to_bf16(f), h);
    }
    cr_assert_eq(gs_f32_to_bf16(1.0f), 0x3f80);
    cr_assert(isnan(gs_bf16_to_f32(gs_f32_to_bf16(NAN))));
}
