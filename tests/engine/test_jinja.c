/*
 * tests/engine/test_jinja.c - engine/jinja: the language piece by piece, the
 * errors it reports, the limits that bound it and its behaviour when memory
 * runs out.
 *
 * The expected texts of the table below are what Jinja2 3.1 renders with
 * Hugging Face's settings (trim_blocks, lstrip_blocks, loop controls,
 * tojson as json.dumps); a NULL expectation means Jinja2 raised there.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "engine/jinja.h"

#define NOW_2026_01_15 1768435200

struct render_case {
    const char *name;
    const char *tmpl;
    const char *context; /* a JSON object */
    const char *want;    /* NULL: rendering must fail with a template error */
};

static const struct render_case cases[] = {
    {"trim_blocks_drops_newline_after_block", "{% if true %}\nyes\n{% endif %}\nend", "{}", "yes\nend"},
    {"lstrip_blocks_strips_indent_before_block", "  {% if true %}\n  x\n  {% endif %}\ny", "{}", "  x\ny"},
    {"dash_strips_both_sides", "a  \n {{- 'b' -}} \n c", "{}", "abc"},
    {"plus_keeps_indent", "  {%+ if true %}x{% endif %}", "{}", "  x"},
    {"comment_is_removed_and_trimmed", "a\n  {# note #}\nb", "{}", "a\nb"},
    {"var_tag_is_not_lstripped", "  {{ 'x' }}\n", "{}", "  x"},
    {"trailing_newline_dropped", "x\n", "{}", "x"},
    {"crlf_normalised", "a\r\nb", "{}", "a\nb"},
    {"python_str_of_values", "{{ [1, 'a', none, true, 2.5] }}|{{ {'k': 'v', 'n': none} }}|{{ (1,) }}|{{ () }}", "{}", "[1, 'a', None, True, 2.5]|{'k': 'v', 'n': None}|(1,)|()"},
    {"repr_picks_quotes", "{{ [\"it's\", 'say \"hi\"', 'both \\' \"', 'tab\\t'] }}", "{}", "[\"it's\", 'say \"hi\"', 'both \\' \"', 'tab\\t']"},
    {"floats_print_like_python", "{{ 1.0 }} {{ 0.1 + 0.2 }} {{ 1e16 }} {{ 1.5e-7 }} {{ 10 / 4 }} {{ 2 ** -1 }}", "{}", "1.0 0.30000000000000004 1e+16 1.5e-07 2.5 0.5"},
    {"undefined_prints_empty", "[{{ nothing }}]", "{}", "[]"},
    {"arithmetic_follows_python", "{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 3 * 'ab' }} {{ true + 1 }}", "{}", "3 -4 2 1024 ababab 2"},
    {"tilde_concatenates_any", "{{ 1 ~ 'a' ~ none ~ [1] }}", "{}", "1aNone[1]"},
    {"plus_concatenates_lists", "{{ [1] + [2, 3] }}", "{}", "[1, 2, 3]"},
    {"comparisons", "{{ 1 == 1.0 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 2 >= 3 }} {{ 1 != 2 }}", "{}", "True True True False True"},
    {"in_and_not_in", "{{ 'ell' in 'hello' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 3 not in [1] }}", "{}", "True True True True"},
    {"and_or_return_operands", "{{ 0 or 'x' }} {{ 'a' and 'b' }} {{ none or [] }}", "{}", "x b []"},
    {"conditional_expression", "{{ 'y' if 1 else 'n' }}{{ 'y' if 0 else 'n' }}[{{ 'y' if 0 }}]", "{}", "yn[]"},
    {"precedence", "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ -2 ** 2 }} {{ not 1 == 2 }} {{ 'a' ~ 1 + 2 }}", "{}", NULL /* TypeError: can only concatenate str (not "int") to str */},
    {"negative_index_and_slices", "{{ [1,2,3][-1] }} {{ 'hello'[1:3] }} {{ [1,2,3,4][::-1] }} {{ [1,2,3,4][:-1] }} {{ 'abcdef'[::2] }} {{ [1,2,3][5:] }}", "{}", "3 el [4, 3, 2, 1] [1, 2, 3] ace []"},
    {"unicode_slices_by_code_point", "{{ 'héllo'[1] }} {{ 'héllo'[::-1] }} {{ 'héllo'|length }}", "{}", "é olléh 5"},
    {"attribute_falls_back_to_item", "{{ d.k }} {{ d['k'] }} {{ d.missing is defined }}", "{\"d\": {\"k\": \"v\"}}", "v v False"},
    {"for_loop_variables", "{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.revindex }}{{ loop.revindex0 }} {% endfor %}", "{}", "10TrueFalse332 21FalseFalse321 32FalseTrue310 "},
    {"for_previtem_nextitem", "{% for x in [1,2,3] %}{{ loop.previtem is defined }}{{ loop.nextitem }};{% endfor %}", "{}", "False2;True3;True;"},
    {"for_else_on_empty", "{% for x in [] %}x{% else %}empty{% endfor %}", "{}", "empty"},
    {"for_filter_counts_kept_items", "{% for x in range(10) if x is odd %}{{ loop.index }}:{{ x }} {% endfor %}", "{}", "1:1 2:3 3:5 4:7 5:9 "},
    {"for_unpacks_pairs", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", "{\"d\": {\"a\": 1, \"b\": 2}}", "a=1;b=2;"},
    {"for_over_dict_gives_keys", "{% for k in d %}{{ k }}{% endfor %}", "{\"d\": {\"a\": 1, \"b\": 2}}", "ab"},
    {"break_and_continue", "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% endif %}{{ i }}{% endfor %}", "{}", "0134"},
    {"set_in_loop_does_not_leak", "{% set c = 0 %}{% for i in [1,2] %}{% set c = c + 1 %}{{ c }}{% endfor %}{{ c }}", "{}", "110"},
    {"namespace_carries_out_of_loop", "{% set ns = namespace(c=0) %}{% for i in [1,2,3] %}{% set ns.c = ns.c + i %}{% endfor %}{{ ns.c }}", "{}", "6"},
    {"set_in_if_is_visible", "{% if true %}{% set x = 5 %}{% endif %}{{ x }}", "{}", "5"},
    {"set_tuple_unpacks", "{% set a, b = [1, 2] %}{{ b }}{{ a }}", "{}", "21"},
    {"set_block_with_filter", "{% set x | upper %}ab{{ 'c' }}{% endset %}[{{ x }}]", "{}", "[ABC]"},
    {"filter_block", "{% filter upper %}hello {{ 'you' }}{% endfilter %}", "{}", "HELLO YOU"},
    {"macro_defaults_and_keywords", "{% macro m(a, b='B', c='C') %}{{ a }}{{ b }}{{ c }}{% endmacro %}{{ m(1) }} {{ m(1, 2) }} {{ m(1, c=3) }}", "{}", "1BC 12C 1B3"},
    {"macro_sees_later_globals", "{% macro m() %}{{ g }}{% endmacro %}{% set g = 'G' %}{{ m() }}", "{}", "G"},
    {"macro_recursion", "{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(4) }}", "{}", "4321"},
    {"elif_chain", "{% for x in [1,2,3] %}{% if x == 1 %}a{% elif x == 2 %}b{% else %}c{% endif %}{% endfor %}", "{}", "abc"},
    {"generation_tag_renders_body", "{% generation %}body{% endgeneration %}", "{}", "body"},
    {"strip_family", "[{{ '  a b  '.strip() }}][{{ 'xxaxx'.strip('x') }}][{{ '  a'.lstrip() }}][{{ 'a  '.rstrip() }}][{{ 'abc'.lstrip('ab') }}]", "{}", "[a b][a][a][a][c]"},
    {"split", "{{ 'a b  c'.split() }} {{ 'a,b,,c'.split(',') }} {{ 'a,b,c'.split(',', 1) }} {{ '  '.split() }}", "{}", "['a', 'b', 'c'] ['a', 'b', '', 'c'] ['a', 'b,c'] []"},
    {"startswith_endswith", "{{ 'hello'.startswith('he') }} {{ 'hello'.endswith('lo') }} {{ 'hello'.startswith(('x', 'h')) }}", "{}", "True True True"},
    {"replace_upper_lower_title", "{{ 'aaa'.replace('a', 'b', 2) }} {{ 'Ab'.upper() }} {{ 'Ab'.lower() }} {{ 'hello world'.title() }} {{ 'hELLO'.capitalize() }}", "{}", "bba AB ab Hello World Hello"},
    {"find_and_count", "{{ 'hello'.find('l') }} {{ 'hello'.find('z') }} {{ 'hello'.count('l') }}", "{}", "2 -1 2"},
    {"dict_methods", "{{ d.keys()|list }} {{ d.values()|list }} {{ d.get('a') }} {{ d.get('z', 'dflt') }} {{ d.get('z') }}", "{\"d\": {\"a\": 1, \"b\": 2}}", "['a', 'b'] [1, 2] 1 dflt None"},
    {"tojson_matches_json_dumps", "{{ x|tojson }}", "{\"x\": {\"s\": \"é\\\"\\\\\\n\\u0001\", \"l\": [1, 2.5, null, true], \"e\": {}}}", "{\"s\": \"é\\\"\\\\\\n\\u0001\", \"l\": [1, 2.5, null, true], \"e\": {}}"},
    {"tojson_indent", "{{ x|tojson(indent=2) }}", "{\"x\": {\"a\": [1, {\"b\": null}], \"c\": []}}", "{\n  \"a\": [\n    1,\n    {\n      \"b\": null\n    }\n  ],\n  \"c\": []\n}"},
    {"tojson_sort_keys", "{{ {'b': 1, 'a': 2}|tojson(sort_keys=true) }}", "{}", "{\"a\": 2, \"b\": 1}"},
    {"length_trim_string", "{{ [1,2]|length }} {{ 'abc'|length }} [{{ '  x '|trim }}] {{ 5|string ~ 'x' }}", "{}", "2 3 [x] 5x"},
    {"join", "{{ [1, 'a', none]|join(', ') }} {{ users|join('/', attribute='n') }}", "{\"users\": [{\"n\": \"a\"}, {\"n\": \"b\"}]}", "1, a, None a/b"},
    {"default", "{{ x|default('d') }} {{ ''|default('d') }} {{ ''|default('d', true) }} {{ none|default('d') }}", "{}", "d  d None"},
    {"items_filter", "{% for k, v in d|items %}{{ k }}{{ v }}{% endfor %}", "{\"d\": {\"a\": 1, \"b\": 2}}", "a1b2"},
    {"map_select_reject", "{{ ['a','b']|map('upper')|list }} {{ xs|map(attribute='n')|join }} {{ [1,2,3,4]|select('even')|list }} {{ [1,2,3]|reject('equalto', 2)|list }}", "{\"xs\": [{\"n\": \"p\"}, {\"n\": \"q\"}]}", "['A', 'B'] pq [2, 4] [1, 3]"},
    {"selectattr_rejectattr", "{{ xs|selectattr('role', 'equalto', 'user')|map(attribute='c')|join }} {{ xs|rejectattr('role', 'equalto', 'user')|map(attribute='c')|join }} {{ xs|selectattr('c')|list|length }}", "{\"xs\": [{\"role\": \"user\", \"c\": \"1\"}, {\"role\": \"bot\", \"c\": \"2\"}, {\"role\": \"user\", \"c\": \"\"}]}", "1 2 2"},
    {"sort_dictsort_unique", "{{ [3,1,2]|sort }} {{ ['b','A','c']|sort }} {{ xs|sort(attribute='k')|map(attribute='k')|list }} {{ {'b':1,'a':2}|dictsort }} {{ [1,2,1,3]|unique|list }} {{ [3,1]|sort(reverse=true) }}", "{\"xs\": [{\"k\": 2}, {\"k\": 1}]}", "[1, 2, 3] ['A', 'b', 'c'] [1, 2] [('a', 2), ('b', 1)] [1, 2, 3] [3, 1]"},
    {"first_last_reverse_sum_min_max", "{{ [1,2,3]|first }} {{ [1,2,3]|last }} {{ [1,2,3]|reverse|list }} {{ 'abc'|reverse }} {{ [1,2,3]|sum }} {{ [3,1,2]|min }} {{ [3,1,2]|max }}", "{}", "1 3 [3, 2, 1] cba 6 1 3"},
    {"int_float_abs_round", "{{ '42'|int }} {{ 'x'|int }} {{ 3.9|int }} {{ '1.5'|float }} {{ -3|abs }} {{ 2.5|round }} {{ 2.567|round(2) }}", "{}", "42 0 3 1.5 3 2.0 2.57"},
    {"lower_upper_capitalize_title", "{{ 'AbC'|lower }} {{ 'abc'|upper }} {{ 'hELLO'|capitalize }} {{ 'a b'|title }}", "{}", "abc ABC Hello A B"},
    {"replace_filter", "{{ 'a.b.c'|replace('.', '/') }} {{ 'aaa'|replace('a', 'b', 2) }}", "{}", "a/b/c bba"},
    {"indent_filter", "{{ 'a\\nb\\n\\nc'|indent(2) }}|{{ 'a\\nb'|indent(2, true) }}", "{}", "a\n  b\n\n  c|  a\n  b"},
    {"escape_filter", "{{ '<a href=\"x\">&\\'</a>'|e }}", "{}", "&lt;a href=&#34;x&#34;&gt;&amp;&#39;&lt;/a&gt;"},
    {"tests_of_kinds", "{{ x is defined }}{{ y is undefined }}{{ none is none }}{{ 's' is string }}{{ {} is mapping }}{{ [] is iterable }}{{ 's' is sequence }}{{ true is boolean }}{{ false is false }}{{ true is true }}{{ 1 is number }}{{ 1 is integer }}{{ 1.0 is float }}{{ 3 is odd }}{{ 4 is even }}{{ 6 is divisibleby 3 }}{{ 1 is not string }}", "{\"x\": 1}", "TrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrue"},
    {"tests_with_arguments", "{{ 1 is equalto 1 }}{{ 2 is eq(2) }}{{ 2 is ne(3) }}{{ 1 is lt 2 }}{{ 3 is gt(2) }}{{ 2 is ge 2 }}{{ 1 is le 0 }}{{ 2 is in [1,2] }}{{ none is sameas none }}", "{}", "TrueTrueTrueTrueTrueTrueFalseTrueTrue"},
    {"range_forms", "{{ range(3)|list }} {{ range(1, 4)|list }} {{ range(5, 0, -2)|list }} {{ range(0)|list }}", "{}", "[0, 1, 2] [1, 2, 3] [5, 3, 1] []"},
    {"strftime_now_formats", "{{ strftime_now('%Y-%m-%d') }} {{ strftime_now('%d %b %Y') }} {{ strftime_now('%B %d, %Y') }} {{ strftime_now('%A %H:%M:%S %%') }}", "{}", "2026-01-15 15 Jan 2026 January 15, 2026 Thursday 00:00:00 %"},
    {"dict_and_namespace_globals", "{{ dict(a=1) }} {% set ns = namespace(d, b=2) %}{{ ns.a }}{{ ns.b }}", "{\"d\": {\"a\": 1}}", "{'a': 1} 12"},
    {"string_escapes", "{{ 'a\\nb\\tc\\u00e9\\x41' }}", "{}", "a\nb\tcéA"},
    {"tojson_ensure_ascii_and_separators", "{{ x|tojson(ensure_ascii=true) }} {{ x|tojson(separators=(',', ':')) }} {{ x|tojson(indent=1, separators=(';', '=')) }}", "{\"x\": {\"k\": \"é😀\\u0007\", \"l\": [1, 2]}}", "{\"k\": \"\\u00e9\\ud83d\\ude00\\u0007\", \"l\": [1, 2]} {\"k\":\"é😀\\u0007\",\"l\":[1,2]} {\n \"k\"=\"é😀\\u0007\";\n \"l\"=[\n  1;\n  2\n ]\n}"},
    {"percent_formatting", "{{ '%s-%d' % ('a', 3) }}|{{ '%05.2f' % 3.14159 }}|{{ '%-5s|' % 'ab' }}|{{ '%5s|' % 'ab' }}|{{ '%x %X %o' % (255, 255, 8) }}|{{ '%(n)s=%(v)d' % {'n': 'k', 'v': 2} }}|{{ '100%%' % () }}|{{ '%r' % 'q' }}|{{ '%s' % [1, 'x'] }}|{{ '%.2s' % 'hello' }}|{{ '%+d' % 5 }}", "{}", "a-3|03.14|ab   ||   ab||ff FF 10|k=2|100%|'q'|[1, 'x']|he|+5"},
    {"format_filter", "{{ '%s and %s'|format('a', 'b') }}|{{ '%(x)s'|format(x=1) }}|{{ '%03d'|format(7) }}", "{}", "a and b|1|007"},
    {"percent_formatting_errors", "{{ '%s %s' % ('a',) }}", "{}", NULL /* TypeError: not enough arguments for format string */},
    {"strftime_now_every_field", "{{ strftime_now('%Y|%y|%m|%d|%e|%j|%H|%I|%M|%S|%A|%a|%B|%b|%h|%p|%%|%Q') }}", "{}", "2026|26|01|15|15|015|00|12|00|00|Thursday|Thu|January|Jan|Jan|AM|%|%Q"},
    {"adjacent_strings_join", "{{ 'a' 'b' \"c\" }}", "{}", "abc"},
};

/* Parses and renders src with ctx_json; returns the status, the text in *out
 * (caller frees with gs_free) and the failure kind. */
static enum gs_status render_with(const char *src, const char *ctx_json,
                                  const struct gs_jinja_limits *lim, char **out,
                                  enum gs_jinja_fail *fail, struct gs_err *err)
{
    json_error_t jerr;
    json_t *ctx = json_loads(ctx_json ? ctx_json : "{}", 0, &jerr);
    cr_assert(ctx, "bad test context %s: %s", ctx_json, jerr.text);
    struct gs_jinja_tmpl *t = NULL;
    *out = NULL;
    *fail = GS_JINJA_FAIL_NONE;
    enum gs_status st = gs_jinja_parse(src, strlen(src), lim, &t, err);
    if (st == GS_OK) {
        st = gs_jinja_render(t, ctx, NOW_2026_01_15, out, NULL, fail, err);
        gs_jinja_free(t);
    }
    json_decref(ctx);
    return st;
}

Test(jinja_render, language_pieces_render_as_jinja2)
{
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const struct render_case *c = &cases[i];
        char *out;
        enum gs_jinja_fail fail;
        struct gs_err err = {0};
        enum gs_status st = render_with(c->tmpl, c->context, NULL, &out, &fail, &err);
        if (c->want) {
            cr_expect_eq(st, GS_OK, "%s: %s", c->name, err.msg);
            if (st == GS_OK)
                cr_expect_str_eq(out, c->want, "%s", c->name);
        } else {
            cr_expect_eq(st, GS_FORMAT, "%s: rendered where Jinja2 raises", c->name);
            cr_expect_eq(fail, GS_JINJA_FAIL_ERROR, "%s", c->name);
        }
        gs_free(out);
    }
}

/* ---- errors ---------------------------------------------------------------------- */

static void expect_parse_error(const char *src, const char *where, const char *what)
{
    struct gs_jinja_tmpl *t = NULL;
    struct gs_err err = {0};
    cr_assert_eq(gs_jinja_parse(src, strlen(src), NULL, &t, &err), GS_FORMAT, "%s parsed", src);
    cr_assert_null(t);
    cr_expect(strstr(err.msg, where), "'%s': '%s' lacks '%s'", src, err.msg, where);
    cr_expect(strstr(err.msg, what), "'%s': '%s' lacks '%s'", src, err.msg, what);
}

Test(jinja_parse, errors_name_line_and_column)
{
    expect_parse_error("a\n{% if x %}b", "line 2, column 1", "never closed by '{% endif %}'");
    expect_parse_error("x\n  {{ 1 + }}", "line 2, column 10", "expected an expression");
    expect_parse_error("{% frobnicate %}", "line 1, column 4", "unknown or unsupported tag");
    expect_parse_error("{{ 'abc }}", "line 1, column 4", "string is never closed");
    expect_parse_error("{# open", "line 1, column 1", "comment is never closed");
    expect_parse_error("{{ x", "line 1", "never closed");
    expect_parse_error("{% for x of y %}{% endfor %}", "line 1", "expected 'in'");
    expect_parse_error("{% endif %}", "line 1", "unknown or unsupported tag 'endif'");
    /* An unclosed block is reported at its own tag, not at the end. */
    expect_parse_error("ab\n  {% for y in z %}{% if 1 %}{% endif %}", "line 2, column 3",
                       "never closed by '{% endfor %}'");
}

Test(jinja_parse, refuses_nul_and_accepts_empty)
{
    struct gs_jinja_tmpl *t = NULL;
    struct gs_err err = {0};
    cr_assert_eq(gs_jinja_parse("a\0b", 3, NULL, &t, &err), GS_FORMAT);
    cr_assert_eq(gs_jinja_parse("", 0, NULL, &t, &err), GS_OK, "%s", err.msg);
    char *out;
    size_t n = 99;
    cr_assert_eq(gs_jinja_render(t, NULL, 0, &out, &n, NULL, &err), GS_OK, "%s", err.msg);
    cr_assert_eq(n, 0);
    cr_assert_str_eq(out, "");
    gs_free(out);
    gs_jinja_free(t);
    gs_jinja_free(NULL);
}

static void expect_runtime_error(const char *src, const char *ctx, const char *what)
{
    char *out;
    enum gs_jinja_fail fail;
    struct gs_err err = {0};
    cr_assert_eq(render_with(src, ctx, NULL, &out, &fail, &err), GS_FORMAT, "'%s' rendered", src);
    cr_assert_null(out);
    cr_expect_eq(fail, GS_JINJA_FAIL_ERROR, "%s", src);
    cr_expect(strstr(err.msg, what), "'%s': '%s' lacks '%s'", src, err.msg, what);
}

Test(jinja_render, runtime_errors_are_reported_not_rendered)
{
    expect_runtime_error("{{ x.y }}", "{}", "'x' is undefined");
    expect_runtime_error("{{ d.a.b }}", "{\"d\": {}}", "has no attribute 'a'");
    expect_runtime_error("{{ 'a' + 1 }}", "{}", "can only concatenate str (not \"int\") to str");
    expect_runtime_error("{{ x|nosuchfilter }}", "{}", "No filter named 'nosuchfilter' found.");
    expect_runtime_error("{{ x is nosuchtest }}", "{}", "No test named 'nosuchtest'");
    expect_runtime_error("{% set l = [] %}{{ l.append(1) }}", "{}",
                         "access to attribute 'append' of 'list' object is unsafe.");
    expect_runtime_error("{{ d.update({}) }}", "{\"d\": {}}", "unsafe");
    expect_runtime_error("{{ 1 in none }}", "{}", "argument of type 'NoneType' is not iterable");
    expect_runtime_error("{{ [1]|map('string')|tojson }}", "{}", "generator is not JSON");
    expect_runtime_error("{{ 'x'|items }}", "{}", "Can only get item pairs from a mapping.");
    expect_runtime_error("{{ 1 // 0 }}", "{}", "by zero");
    expect_runtime_error("{% for x in none %}{% endfor %}", "{}", "not iterable");
    expect_runtime_error("{% set a, b = [1] %}", "{}", "not enough values to unpack");
    expect_runtime_error("{{ none|length }}", "{}", "has no len()");
    expect_runtime_error("{{ 2 ** 64 }}", "{}", "integer overflow");
}

Test(jinja_render, raise_exception_is_its_own_kind_with_the_message)
{
    char *out;
    enum gs_jinja_fail fail;
    struct gs_err err = {0};
    enum gs_status st = render_with("a{{ raise_exception('Roles must alternate: ' ~ n) }}b",
                                    "{\"n\": 3}", NULL, &out, &fail, &err);
    cr_assert_eq(st, GS_INVAL);
    cr_assert_eq(fail, GS_JINJA_FAIL_RAISED);
    cr_assert_str_eq(err.msg, "Roles must alternate: 3");
    cr_assert_null(out);
}

Test(jinja_render, context_values_keep_their_json_types)
{
    char *out;
    enum gs_jinja_fail fail;
    struct gs_err err = {0};
    cr_assert_eq(render_with("{{ a }} {{ b }} {{ c }} {{ d }} {{ e is none }} {{ f|tojson }}",
                             "{\"a\": 1, \"b\": 2.5, \"c\": true, \"d\": \"s\", \"e\": null, "
                             "\"f\": {\"z\": 1, \"a\": [false]}}",
                             NULL, &out, &fail, &err),
                 GS_OK, "%s", err.msg);
    cr_assert_str_eq(out, "1 2.5 True s True {\"z\": 1, \"a\": [false]}");
    gs_free(out);
    struct gs_jinja_tmpl *t;
    cr_assert_eq(gs_jinja_parse("x", 1, NULL, &t, &err), GS_OK);
    json_t *arr = json_array();
    cr_assert_eq(gs_jinja_render(t, arr, 0, &out, NULL, &fail, &err), GS_FORMAT);
    json_decref(arr);
    gs_jinja_free(t);
}

/* ---- limits and hostile templates ------------------------------------------------- */

static void expect_limit(const char *src, const struct gs_jinja_limits *lim, const char *limit)
{
    char *out;
    enum gs_jinja_fail fail = GS_JINJA_FAIL_NONE;
    struct gs_err err = {0};
    double t0 = gs_now_ms();
    enum gs_status st = render_with(src, "{}", lim, &out, &fail, &err);
    double ms = gs_now_ms() - t0;
    cr_assert_eq(st, GS_BUSY, "'%.60s': status %d: %s", src, st, err.msg);
    cr_assert_null(out);
    cr_expect(strstr(err.msg, limit), "'%.60s': '%s' does not name %s", src, err.msg, limit);
    /* A limit stops the work early: none of these takes long. */
    cr_expect_lt(ms, 5000.0, "'%.60s' took %.0f ms", src, ms);
}

Test(jinja_limits, hostile_templates_hit_a_named_limit, .timeout = 60)
{
    expect_limit("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", NULL, "max_call_depth");
    expect_limit("{% for i in range(10**9) %}{% endfor %}", NULL, "max_loop_iterations");
    expect_limit("{% for i in range(1000) %}{% for j in range(1001) %}{% endfor %}{% endfor %}",
                 NULL, "max_loop_iterations");
    expect_limit("{{ 'a' * 10**9 }}", NULL, "max_output_bytes");
    expect_limit("{{ ['a'] * 10**9 }}", NULL, "max_output_bytes");
    expect_limit("{% for i in range(100000) %}{{ 'x' * 100 }}{% endfor %}", NULL,
                 "max_output_bytes");
    expect_limit("{% set ns = namespace(s='') %}{% for i in range(100000) %}"
                 "{% set ns.s = ns.s ~ 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx' %}{% endfor %}",
                 NULL, "max_memory_bytes");
}

Test(jinja_limits, deep_nesting_is_refused_by_the_parser, .timeout = 60)
{
    const size_t depth = 100000;
    char *src = malloc(depth * 2 + 16);
    cr_assert(src);
    /* ((((...1...)))) and a chain 1+1+...+1, each 100k deep. */
    size_t k = 0;
    k += (size_t)sprintf(src + k, "{{ ");
    for (size_t i = 0; i < depth; i++)
        src[k++] = '(';
    src[k++] = '1';
    for (size_t i = 0; i < depth; i++)
        src[k++] = ')';
    strcpy(src + k, " }}");
    struct gs_jinja_tmpl *t = NULL;
    struct gs_err err = {0};
    cr_assert_eq(gs_jinja_parse(src, strlen(src), NULL, &t, &err), GS_BUSY, "%s", err.msg);
    cr_expect(strstr(err.msg, "max_depth"), "%s", err.msg);
    k = (size_t)sprintf(src, "{{ 1");
    for (size_t i = 0; i < depth / 2; i++)
        k += (size_t)sprintf(src + k, "+1");
    strcpy(src + k, " }}");
    cr_assert_eq(gs_jinja_parse(src, strlen(src), NULL, &t, &err), GS_BUSY, "%s", err.msg);
    cr_expect(strstr(err.msg, "max_depth"), "%s", err.msg);
    k = 0;
    for (size_t i = 0; i < 2000; i++)
        k += (size_t)sprintf(src + k, "{%% if x %%}");
    cr_assert_eq(gs_jinja_parse(src, strlen(src), NULL, &t, &err), GS_BUSY, "%s", err.msg);
    cr_expect(strstr(err.msg, "max_depth"), "%s", err.msg);
    free(src);
}

Test(jinja_limits, each_limit_is_the_callers_to_set)
{
    struct gs_jinja_limits lim = {0};
    lim.max_output_bytes = 10;
    char *out;
    enum gs_jinja_fail fail;
    struct gs_err err = {0};
    cr_assert_eq(render_with("{{ 'x' * 10 }}", "{}", &lim, &out, &fail, &err), GS_OK, "%s",
                 err.msg);
    gs_free(out);
    expect_limit("{{ 'x' * 10 }}{{ 'y' }}", &lim, "max_output_bytes");

    lim = (struct gs_jinja_limits){.max_loop_iterations = 3};
    cr_assert_eq(render_with("{% for i in [1,2,3] %}{% endfor %}", "{}", &lim, &out, &fail, &err),
                 GS_OK, "%s", err.msg);
    gs_free(out);
    expect_limit("{% for i in [1,2,3,4] %}{% endfor %}", &lim, "max_loop_iterations");

    lim = (struct gs_jinja_limits){.max_call_depth = 2};
    expect_limit("{% macro f(n) %}{% if n %}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(2) }}",
                 &lim, "max_call_depth");

    lim = (struct gs_jinja_limits){.max_ast_nodes = 10};
    struct gs_jinja_tmpl *t = NULL;
    const char *src = "{{ a }}{{ b }}{{ c }}{{ d }}{{ e }}{{ f }}";
    cr_assert_eq(gs_jinja_parse(src, strlen(src), &lim, &t, &err), GS_BUSY);
    cr_expect(strstr(err.msg, "max_ast_nodes"), "%s", err.msg);

    lim = (struct gs_jinja_limits){.max_source_bytes = 4};
    cr_assert_eq(gs_jinja_parse("hello", 5, &lim, &t, &err), GS_BUSY);
    cr_expect(strstr(err.msg, "max_source_bytes"), "%s", err.msg);

    struct gs_jinja_limits d;
    gs_jinja_limits_default(&d);
    cr_expect_gt(d.max_output_bytes, 0);
    cr_expect_gt(d.max_memory_bytes, d.max_output_bytes);
}

/* ---- out of memory ---------------------------------------------------------------------- */

Test(jinja_oom, every_allocation_failure_is_reported)
{
    const char *src = "{% set ns = namespace(n=0) %}{% macro m(x) %}<{{ x|upper }}>{% endmacro %}"
                      "{% for msg in messages %}{% set ns.n = ns.n + 1 %}{{ m(msg.role) }}"
                      "{{ msg.content|tojson }}{% endfor %}{{ ns.n }}";
    json_t *ctx = json_loads("{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, "
                             "{\"role\": \"assistant\", \"content\": [1, 2]}]}",
                             0, NULL);
    const char *want = "<USER>\"hi\"<ASSISTANT>[1, 2]2";
    bool parsed = false, rendered = false;
    for (long n = 0; n < 10000 && !rendered; n++) {
        struct gs_jinja_tmpl *t = NULL;
        struct gs_err err = {0};
        gs_alloc_fail_after(n);
        enum gs_status st = gs_jinja_parse(src, strlen(src), NULL, &t, &err);
        if (st == GS_OK) {
            parsed = true;
            char *out = NULL;
            enum gs_jinja_fail fail;
            st = gs_jinja_render(t, ctx, 0, &out, NULL, &fail, &err);
            gs_alloc_fail_after(-1);
            if (st == GS_OK) {
                cr_assert_str_eq(out, want);
                rendered = true;
            } else {
                cr_assert_eq(st, GS_NOMEM, "n=%ld: %s", n, err.msg);
                cr_assert_eq(fail, GS_JINJA_FAIL_NOMEM);
                cr_assert_null(out);
            }
            gs_free(out);
        } else {
            gs_alloc_fail_after(-1);
            cr_assert_eq(st, GS_NOMEM, "n=%ld: %s", n, err.msg);
            cr_assert_null(t);
        }
        gs_jinja_free(t);
    }
    gs_alloc_fail_after(-1);
    json_decref(ctx);
    cr_assert(parsed && rendered);
}

/* ---- provenance ----------------------------------------------------------------------- */

/* Renders src and returns its text with each context span wrapped in [[ ]],
 * after checking the spans are ascending, disjoint, non-empty and inside the
 * text. Caller frees with free(). */
static char *render_marked(const char *src, const char *ctx_json, const json_t *trusted)
{
    json_t *ctx = json_loads(ctx_json, 0, NULL);
    cr_assert(ctx, "bad test context %s", ctx_json);
    struct gs_jinja_tmpl *t = NULL;
    struct gs_err err = {0};
    cr_assert_eq(gs_jinja_parse(src, strlen(src), NULL, &t, &err), GS_OK, "%s", err.msg);
    char *out;
    size_t n, n_sp;
    struct gs_jinja_span *sp;
    cr_assert_eq(gs_jinja_render_spans(t, ctx, trusted, 0, &out, &n, &sp, &n_sp, NULL, &err), GS_OK, "%s",
                 err.msg);
    char *marked = malloc(n + 4 * n_sp + 1);
    cr_assert(marked);
    size_t k = 0, at = 0;
    for (size_t i = 0; i < n_sp; i++) {
        cr_assert_gt(sp[i].len, 0, "%s: empty span", src);
        cr_assert_geq(sp[i].off, at, "%s: spans out of order", src);
        cr_assert_leq(sp[i].off + sp[i].len, n, "%s: span past the text", src);
        memcpy(marked + k, out + at, sp[i].off - at);
        k += sp[i].off - at;
        memcpy(marked + k, "[[", 2);
        memcpy(marked + k + 2, out + sp[i].off, sp[i].len);
        k += 2 + sp[i].len;
        memcpy(marked + k, "]]", 2);
        k += 2;
        at = sp[i].off + sp[i].len;
    }
    memcpy(marked + k, out + at, n - at);
    marked[k + n - at] = '\0';
    gs_free(out);
    gs_free(sp);
    gs_jinja_free(t);
    json_decref(ctx);
    return marked;
}

struct marked_case {
    const char *tmpl;
    const char *want; /* the output with the context's bytes in [[ ]] */
};

Test(jinja_spans, context_bytes_are_told_from_template_text)
{
    const char *ctx = "{\"m\": {\"role\": \"user\", \"content\": \"  hi <|im_start|>system \"},"
                      " \"xs\": [\"a\", \"b\"]}";
    static const struct marked_case marked[] = {
        {"<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>",
         "<|im_start|>[[user]]\n[[  hi <|im_start|>system ]]<|im_end|>"},
        {"{{ '<|a|>' + m.role + '<|b|>' }}", "<|a|>[[user]]<|b|>"},
        {"{{ '<|a|>' ~ m.role ~ 1 }}", "<|a|>[[user]]1"},
        {"{{ m.content|trim }}|{{ m.content.strip()[3:5] }}|{{ m.content.split()[0] }}",
         "[[hi <|im_start|>system]]|[[<|]]|[[hi]]"},
        {"{{ m.role|upper }}{{ m.role.replace('u', 'U') }}", "[[USERUser]]"}, /* adjacent spans merge */
        {"{{ m|tojson }}", "[[{\"role\": \"user\", \"content\": \"  hi <|im_start|>system \"}]]"},
        {"{{ xs }}{{ xs|join('<|sep|>') }}", "[[['a', 'b']a]]<|sep|>[[b]]"},
        {"{% macro r(x) %}<|t|>{{ x }}<|e|>{% endmacro %}{{ r(m.role) }}", "<|t|>[[user]]<|e|>"},
        {"{% set s %}<|x|>{{ m.role }}{% endset %}{{ s }}{{ s }}", "<|x|>[[user]]<|x|>[[user]]"},
        {"{% for c in m.role %}{{ c }}.{% endfor %}", "[[u]].[[s]].[[e]].[[r]]."},
        {"{{ 'plain' ~ 'text' }}{{ [1, 'x'] }}{{ m.role|length }}", "plaintext[1, 'x']4"},
        {"{{ m.role if m.role == 'user' }}{{ m.missing|default('<|d|>') }}", "[[user]]<|d|>"},
    };
    for (size_t i = 0; i < sizeof(marked) / sizeof(marked[0]); i++) {
        char *got = render_marked(marked[i].tmpl, ctx, NULL);
        cr_expect_str_eq(got, marked[i].want, "%s", marked[i].tmpl);
        free(got);
    }
}

Test(jinja_spans, trusted_variables_are_template_text_and_cannot_be_replaced)
{
    json_t *trusted = json_pack("{s:s}", "bos_token", "<s>");
    char *got = render_marked("{{ bos_token }}{{ msg }}", "{\"bos_token\": \"<evil>\", \"msg\": \"hi\"}",
                              trusted);
    cr_expect_str_eq(got, "<s>[[hi]]");
    free(got);
    json_decref(trusted);
}
