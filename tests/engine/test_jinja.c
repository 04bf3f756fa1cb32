/*
 * tests/engine/test_jinja.c - engine/jinja: the language piece by piece.
 */
#include <criterion/criterion.h>

#include "engine/jinja.h"

Test(jinja_parse, placeholder)
{
    struct gs_jinja_tmpl *t = NULL;
    struct gs_err err = {0};
    cr_assert_eq(gs_jinja_parse("x", 1, NULL, &t, &err), GS_OK);
    gs_jinja_free(t);
}
