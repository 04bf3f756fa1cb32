/*
 * tests/engine/test_grammar_schema.c - engine/grammar/schema.c: JSON Schema to
 * GBNF, keyword by keyword, the refusals (keyword and JSON path in the
 * message), the limits, running out of memory, and the 200 shared schemas
 * (../shared/golden/schemas/schemas.jsonl: each converts or is refused with a
 * message naming a keyword; the fraction converted is printed).
 *
 * The grammar texts are checked for what they must contain. That the
 * sentences of each grammar validate against its schema is checked by
 * tests/engine/schema_sample.py over grammars this suite writes when
 * GS_SCHEMA_DUMP_DIR is set (it needs python3-jsonschema).
 */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar.h"
#include "tests/common/testutil.h"

/* Converts schema text; on success returns the grammar (gs_free it). */
static char *convert(const char *schema_text, enum gs_status *st, struct gs_err *err)
{
    json_error_t jerr;
    json_t *s = json_loads(schema_text, JSON_DECODE_ANY, &jerr);
    cr_assert(s, "test schema does not parse: %s: %s", schema_text, jerr.text);
    char *g = NULL;
    size_t len = 0;
    *st = gs_grammar_from_json_schema(s, &g, &len, err);
    json_decref(s);
    if (*st == GS_OK) {
        cr_assert(g && strlen(g) == len, "length %zu does not match the text", len);
        cr_assert(!strncmp(g, "root ::= ", 9), "the grammar does not start with root: %s", g);
    } else {
        cr_assert(!g, "output on failure");
    }
    return g;
}

static char *convert_ok(const char *schema_text)
{
    enum gs_status st;
    struct gs_err err = {0};
    char *g = convert(schema_text, &st, &err);
    cr_assert_eq(st, GS_OK, "%s: refused: %s", schema_text, err.msg);
    return g;
}

/* ---- supported keywords: what the grammar must contain ---------------------- */

struct accept_case {
    const char *name;
    const char *schema;
    const char *want[6]; /* substrings of the grammar, NULL-terminated */
};

static const struct accept_case accept_cases[] = {
    {"any", "{}", {"root ::= value", "object ::=", "ws ::= ( \" \" | \"\\n\" [ \\t]{0,20} )?"}},
    {"true", "true", {"root ::= value"}},
    {"string", "{\"type\": \"string\"}", {"root ::= string", "char ::="}},
    {"integer", "{\"type\": \"integer\"}", {"root ::= integer", "[1-9] [0-9]{0,15}"}},
    {"number", "{\"type\": \"number\"}", {"root ::= number", "[eE]"}},
    {"boolean_null_union", "{\"type\": [\"boolean\", \"null\"]}",
     {"root ::= ( boolean | null )", "\"true\"", "\"null\" ws"}},
    {"number_integer_union_keeps_number", "{\"type\": [\"integer\", \"number\"]}",
     {"root ::= number"}},
    {"min_max_length", "{\"type\": \"string\", \"minLength\": 2, \"maxLength\": 5}",
     {"char{2,5}"}},
    {"min_length_only", "{\"type\": \"string\", \"minLength\": 3}", {"char{3,}"}},
    {"max_length_tightened", "{\"type\": \"string\", \"maxLength\": 1000000000}",
     {"char{0,4096}"}},
    {"int_range", "{\"type\": \"integer\", \"minimum\": 10, \"maximum\": 250}",
     {"\"2\" ( [0-4] [0-9]{1} | \"5\" \"0\" )"}},
    {"int_negative_range", "{\"type\": \"integer\", \"minimum\": -12, \"maximum\": -3}",
     {"\"-\" ( [3-9] | \"1\" [0-2] )"}},
    {"int_exclusive_draft6", "{\"type\": \"integer\", \"exclusiveMinimum\": 0}",
     {"( [1-9] | [1-9] [0-9]{1,15} )"}},
    {"int_exclusive_draft4",
     "{\"type\": \"integer\", \"minimum\": 0, \"exclusiveMinimum\": true, \"maximum\": 9}",
     {"( [1-9] )"}},
    {"int32", "{\"type\": \"integer\", \"format\": \"int32\"}", {"\"6\" ( [0-3] [0-9]{1} | \"4\" [0-7] )"}},
    {"number_bounds", "{\"type\": \"number\", \"minimum\": 0, \"maximum\": 1}",
     {"( \"0\" ) ( \".\" ( [0-9] [0-9]{0,15} ) )?", "( \"1\" ) ( \".\" ( \"0\"{1,16} ) )?"}},
    {"number_exclusive_zero", "{\"type\": \"number\", \"exclusiveMinimum\": 0}",
     {"\".\" ( [1-9] [0-9]{0,5} | \"0\" ( [1-9] [0-9]{0,4} |", "[1-9] [0-9]{1,8} ) ( \".\" [0-9]{1,6} )?"}},
    {"multiple_of_one", "{\"type\": \"number\", \"multipleOf\": 1}", {"root ::= integer"}},
    {"enum_any_values", "{\"enum\": [\"a\", 1, null, [1, 2], {\"k\": true}]}",
     {"\"\\\"a\\\"\"", "\"1\"", "\"null\"", "\"[1,2]\"", "\"{\\\"k\\\":true}\""}},
    {"enum_filtered_by_type", "{\"type\": \"string\", \"enum\": [\"a\", 2]}",
     {"( \"\\\"a\\\"\" ) ws"}},
    {"const", "{\"const\": \"fixed\"}", {"\"\\\"fixed\\\"\""}},
    {"object_order_and_required",
     "{\"type\": \"object\", \"properties\": {\"z\": {\"type\": \"string\"}, \"a\": {\"type\": "
     "\"integer\"}}, \"required\": [\"a\"]}",
     {"\"\\\"z\\\"\" ws \":\" ws", "\"\\\"a\\\"\" ws \":\" ws", "( \",\" ws kv-"}},
    {"object_closed_by_default", "{\"type\": \"object\", \"properties\": {\"a\": {}}}",
     {"\"{\" ws obj-a-"}},
    {"additional_properties_schema",
     "{\"type\": \"object\", \"properties\": {\"id\": {\"type\": \"integer\"}}, "
     "\"additionalProperties\": {\"type\": \"string\"}}",
     {"kv-other", "kchar*", "[^\"\\\\\\x7F\\x00-\\x1F\\u0069]"}},
    {"required_not_listed", "{\"type\": \"object\", \"required\": [\"x\"]}",
     {"\"\\\"x\\\"\" ws \":\" ws value"}},
    {"array_items_bounds",
     "{\"type\": \"array\", \"items\": {\"type\": \"integer\"}, \"minItems\": 1, \"maxItems\": 3}",
     {"\"[\" ws", "( \",\" ws integer ){0,2}"}},
    {"array_unbounded", "{\"type\": \"array\", \"items\": {\"type\": \"string\"}}",
     {"( string ( \",\" ws string )* )?"}},
    {"prefix_items_2020",
     "{\"prefixItems\": [{\"type\": \"integer\"}, {\"type\": \"string\"}], \"items\": false}",
     {"integer ( \",\" ws string )?"}},
    {"tuple_draft4",
     "{\"type\": \"array\", \"items\": [{\"type\": \"integer\"}, {\"type\": \"boolean\"}], "
     "\"additionalItems\": {\"type\": \"null\"}, \"minItems\": 2}",
     {"integer \",\" ws boolean ( \",\" ws null )*"}},
    {"ref_defs",
     "{\"$defs\": {\"pos\": {\"type\": \"integer\", \"minimum\": 1}}, \"type\": \"object\", "
     "\"properties\": {\"a\": {\"$ref\": \"#/$defs/pos\"}, \"b\": {\"$ref\": \"#/$defs/pos\"}}}",
     {"ref-pos-"}},
    {"ref_recursive_root",
     "{\"type\": \"object\", \"properties\": {\"child\": {\"$ref\": \"#\"}}}",
     {"\"\\\"child\\\"\" ws \":\" ws root"}},
    {"ref_percent_and_tilde",
     "{\"definitions\": {\"a/b\": {\"type\": \"null\"}, \"c d\": {\"type\": \"boolean\"}}, "
     "\"anyOf\": [{\"$ref\": \"#/definitions/a~1b\"}, {\"$ref\": \"#/definitions/c%20d\"}]}",
     {"ref-a-1b-0 ::= null", "ref-c-20d-1 ::= boolean"}},
    {"any_of", "{\"anyOf\": [{\"type\": \"string\"}, {\"type\": \"integer\"}]}",
     {"root ::= ( string | integer )"}},
    {"one_of_disjoint_types", "{\"oneOf\": [{\"type\": \"string\"}, {\"type\": \"integer\"}]}",
     {"root ::= ( string | integer )"}},
    {"one_of_discriminator",
     "{\"oneOf\": [{\"type\": \"object\", \"properties\": {\"k\": {\"const\": \"a\"}}, "
     "\"required\": [\"k\"]}, {\"type\": \"object\", \"properties\": {\"k\": {\"const\": "
     "\"b\"}}, \"required\": [\"k\"]}]}",
     {"\"\\\"a\\\"\"", "\"\\\"b\\\"\""}},
    {"all_of_merges_objects",
     "{\"allOf\": [{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"string\"}}, "
     "\"required\": [\"a\"]}, {\"properties\": {\"b\": {\"type\": \"integer\", \"minimum\": "
     "0}}}]}",
     {"\"\\\"a\\\"\"", "\"\\\"b\\\"\""}},
    {"ref_with_siblings_intersects",
     "{\"definitions\": {\"s\": {\"type\": \"string\"}}, \"$ref\": \"#/definitions/s\", "
     "\"maxLength\": 4}",
     {"char{0,4}"}},
    {"any_of_with_siblings_distributes",
     "{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"string\"}, \"b\": {\"type\": "
     "\"string\"}}, \"anyOf\": [{\"required\": [\"a\"]}, {\"required\": [\"b\"]}]}",
     {"anyOf-"}},
    {"formats",
     "{\"type\": \"object\", \"properties\": {\"d\": {\"type\": \"string\", \"format\": "
     "\"date-time\"}, \"u\": {\"type\": \"string\", \"format\": \"uuid\"}, \"e\": {\"format\": "
     "\"email\"}, \"i\": {\"format\": \"ipv4\"}}}",
     {"fmt-date-time ::=", "fmt-uuid ::=", "fmt-email ::=", "fmt-ipv4 ::="}},
    {"pattern_anchored", "{\"type\": \"string\", \"pattern\": \"^[a-z]{2,3}-\\\\d+$\"}",
     {"( [\\u0061-\\u007A] ){2,3} \"-\" ( [\\u0030-\\u0039] )+"}},
    {"pattern_unanchored_is_a_search", "{\"type\": \"string\", \"pattern\": \"ab\"}",
     {"( char* \"a\" \"b\" char* )"}},
    {"pattern_alternation_group", "{\"pattern\": \"^(?:cat|dog)s?$\"}",
     {"( \"c\" \"a\" \"t\" | \"d\" \"o\" \"g\" )", "( \"s\" )?"}},
    {"pattern_escapes_quote", "{\"pattern\": \"^\\\"$\"}", {"\"\\\\\\\"\""}},
    {"annotations_ignored",
     "{\"title\": \"t\", \"description\": \"d\", \"default\": 1, \"examples\": [1], \"$schema\": "
     "\"x\", \"$id\": \"y\", \"$comment\": \"c\", \"readOnly\": true, \"deprecated\": false, "
     "\"_format\": \"weird\", \"_uniqueItems\": true, \"x-vendor\": 1, \"type\": \"null\"}",
     {"root ::= null"}},
    /* In no draft's vocabulary, so an annotation, as validators treat it. */
    {"unknown_keyword_is_an_annotation",
     "{\"type\": \"null\", \"javaType\": \"x.Y\", \"pettern\": \"x\", \"links\": []}",
     {"root ::= null"}},
    {"dependencies_on_required",
     "{\"type\": \"object\", \"properties\": {\"a\": {}, \"b\": {}}, \"required\": [\"a\"], "
     "\"dependencies\": {\"a\": [\"b\"]}}",
     {"\"\\\"b\\\"\""}},
    {"min_properties_met_by_required",
     "{\"type\": \"object\", \"properties\": {\"a\": {}}, \"required\": [\"a\"], "
     "\"minProperties\": 1}",
     {"\"\\\"a\\\"\""}},
    {"iglu_self_is_an_annotation",
     "{\"self\": {\"vendor\": \"com.acme\", \"name\": \"e\", \"format\": \"jsonschema\", "
     "\"version\": \"1-0-0\"}, \"type\": \"boolean\"}",
     {"root ::= boolean"}},
    {"url_and_semver", "{\"properties\": {\"u\": {\"format\": \"url\"}, \"v\": {\"format\": "
     "\"semver\"}}}",
     {"fmt-url ::= \"http\" \"s\"?", "fmt-semver ::="}},
    {"enum_ignores_object_keywords",
     "{\"type\": [\"object\", \"string\"], \"properties\": {\"a\": {}}, \"enum\": [\"x\"]}",
     {"( \"\\\"x\\\"\" ) ws"}},
    {"all_of_additional_properties_trivial",
     "{\"additionalProperties\": {}, \"allOf\": [{\"type\": \"object\", \"properties\": {\"a\": "
     "{\"type\": \"null\"}}, \"additionalProperties\": false}]}",
     {"\"\\\"a\\\"\" ws \":\" ws null"}},
    {"unique_items_with_one_item", "{\"type\": \"array\", \"uniqueItems\": true, \"maxItems\": 1}",
     {"\"[\" ws"}},
};

ParameterizedTestParameters(grammar_schema, accepts)
{
    /* Rows by index: the test runs in another process, where pointers into
     * this one's data are not valid. */
    static int rows[GS_ARRAY_LEN(accept_cases)];
    for (size_t i = 0; i < GS_ARRAY_LEN(rows); i++)
        rows[i] = (int)i;
    return cr_make_param_array(int, rows, GS_ARRAY_LEN(rows));
}

ParameterizedTest(int *row, grammar_schema, accepts)
{
    const struct accept_case *tc = &accept_cases[*row];
    char *g = convert_ok(tc->schema);
    for (size_t i = 0; i < GS_ARRAY_LEN(tc->want) && tc->want[i]; i++)
        cr_expect(strstr(g, tc->want[i]), "%s: '%s' missing from:\n%s", tc->name, tc->want[i], g);
    gs_free(g);
}

/* ---- refusals: the message names the keyword and its path ------------------ */

struct refuse_case {
    const char *name;
    const char *schema;
    const char *msg; /* exact, or a prefix when it ends with '*' */
};

static const struct refuse_case refuse_cases[] = {
    {"not", "{\"type\": \"object\", \"properties\": {\"a\": {\"not\": {\"type\": \"string\"}}}}",
     "unsupported keyword 'not' at #/properties/a"},
    {"not_with_content", "{\"not\": {\"type\": \"string\"}}", "unsupported keyword 'not' at #"},
    {"if_then_else", "{\"if\": {}, \"then\": {}}", "unsupported keyword 'if' at #"},
    {"unevaluated_properties", "{\"type\": \"object\", \"unevaluatedProperties\": false}",
     "unsupported keyword 'unevaluatedProperties' at #"},
    {"contains", "{\"type\": \"array\", \"contains\": {\"const\": 1}}",
     "unsupported keyword 'contains' at #"},
    {"dependencies_schema_on_required",
     "{\"type\": \"object\", \"properties\": {\"a\": {}}, \"required\": [\"a\"], "
     "\"dependencies\": {\"a\": {\"required\": [\"b\"]}}}",
     "unsupported keyword 'dependencies' at #: a schema that a required property brings along"},
    {"dependencies_on_an_extra_key",
     "{\"type\": \"object\", \"additionalProperties\": true, \"dependencies\": {\"x\": "
     "[\"y\"]}}",
     "unsupported keyword 'dependencies' at #: on a name that an extra key could spell"},
    {"unknown_format", "{\"type\": \"string\", \"format\": \"path\"}",
     "unsupported keyword 'format' at #: unknown format*"},
    {"format_on_integer", "{\"type\": \"integer\", \"format\": \"uuid\"}",
     "unsupported keyword 'format' at #*"},
    {"pattern_backreference", "{\"pattern\": \"^(a)\\\\1$\"}",
     "unsupported keyword 'pattern' at #: backreferences are not supported"},
    {"pattern_lookahead", "{\"pattern\": \"^(?=a)a$\"}", "unsupported keyword 'pattern' at #*"},
    {"pattern_inner_anchor", "{\"pattern\": \"a^b\"}", "unsupported keyword 'pattern' at #*"},
    {"pattern_unbounded_beside_max_length", "{\"pattern\": \"^a+b+$\", \"maxLength\": 5}",
     "unsupported keyword 'maxLength' at #: beside a pattern whose lengths it cannot bound"},
    {"pattern_nullable_star", "{\"pattern\": \"^(a*)*$\"}",
     "unsupported keyword 'pattern' at #: a repetition of something that can match nothing"},
    {"unique_items", "{\"type\": \"array\", \"uniqueItems\": true}",
     "unsupported keyword 'uniqueItems' at #*"},
    {"multiple_of", "{\"type\": \"integer\", \"multipleOf\": 3}",
     "unsupported keyword 'multipleOf' at #*"},
    {"bound_with_many_decimals", "{\"type\": \"number\", \"minimum\": 0.12345678901234567}",
     "unsupported keyword 'minimum' at #: a bound with more than 15 decimals"},
    {"exclusive_bound_with_many_decimals",
     "{\"type\": \"number\", \"exclusiveMinimum\": 0.1234567}",
     "unsupported keyword 'exclusiveMinimum' at #: beside an exclusive bound, a bound over 1e9 or "
     "with more than 6 decimals"},
    {"pattern_properties_in_path",
     "{\"properties\": {\"a/b\": {\"items\": {\"propertyNames\": {}}}}}",
     "unsupported keyword 'propertyNames' at #/properties/a~1b/items"},
    {"ref_target_path",
     "{\"definitions\": {\"d\": {\"contains\": {}}}, \"items\": {\"$ref\": \"#/definitions/d\"}}",
     "unsupported keyword 'contains' at #/definitions/d"},
    {"one_of_overlapping",
     "{\"oneOf\": [{\"type\": \"integer\"}, {\"type\": \"number\"}]}",
     "unsupported keyword 'oneOf' at #: alternatives 0 and 1 may both match"},
    {"one_of_untyped_overlaps",
     "{\"oneOf\": [{\"properties\": {\"a\": {}}}, {\"type\": \"string\"}]}",
     "unsupported keyword 'oneOf' at #: alternatives 0 and 1 may both match"},
    {"all_of_types_disjoint", "{\"allOf\": [{\"type\": \"string\"}, {\"type\": \"integer\"}]}",
     "unsupported keyword 'allOf' at #/allOf/1: the types do not intersect"},
    {"all_of_patterns", "{\"allOf\": [{\"pattern\": \"a\"}, {\"pattern\": \"b\"}]}",
     "unsupported keyword 'allOf' at #/allOf/1: differing 'pattern' cannot be intersected"},
    {"left_recursion", "{\"anyOf\": [{\"$ref\": \"#\"}, {\"type\": \"null\"}]}",
     "unsupported keyword '$ref' at #/anyOf/0: a recursion that writes nothing before it recurs"},
    {"ref_cycle",
     "{\"definitions\": {\"a\": {\"$ref\": \"#/definitions/b\"}, \"b\": {\"$ref\": "
     "\"#/definitions/a\"}}, \"$ref\": \"#/definitions/a\"}",
     "unsupported keyword '$ref' at #/definitions/b*"},
    {"ref_remote", "{\"$ref\": \"http://example.com/s.json\"}",
     "unsupported keyword '$ref' at #: only local references (\"#...\") are supported"},
    {"ref_unresolved", "{\"properties\": {\"a\": {\"$ref\": \"#/definitions/missing\"}}}",
     "'$ref' at #/properties/a: '#/definitions/missing' does not resolve"},
    {"enum_empty_after_type", "{\"type\": \"string\", \"enum\": [1, 2]}",
     "unsupported keyword 'enum' at #: no value satisfies the schema"},
    {"required_forbidden", "{\"required\": [\"x\"], \"additionalProperties\": false}",
     "unsupported keyword 'required' at #: names a property that additionalProperties false "
     "forbids"},
    {"min_properties_unmet", "{\"type\": \"object\", \"minProperties\": 1}",
     "unsupported keyword 'minProperties' at #: more than the properties that can be written"},
    {"empty_int_range", "{\"type\": \"integer\", \"minimum\": 5, \"maximum\": 4}",
     "unsupported keyword 'minimum' at #: no integer lies within the bounds"},
    {"bad_type_name", "{\"type\": \"any\"}", "unsupported keyword 'type' at #: unknown type name"},
    {"bad_value_type", "{\"type\": \"string\", \"minLength\": \"3\"}",
     "keyword 'minLength' at #: must be a non-negative integer"},
    {"not_a_schema", "{\"properties\": {\"a\": 3}}",
     "schema at #/properties/a: must be an object or a boolean"},
};

ParameterizedTestParameters(grammar_schema, refuses)
{
    /* Rows by index: the test runs in another process, where pointers into
     * this one's data are not valid. */
    static int rows[GS_ARRAY_LEN(refuse_cases)];
    for (size_t i = 0; i < GS_ARRAY_LEN(rows); i++)
        rows[i] = (int)i;
    return cr_make_param_array(int, rows, GS_ARRAY_LEN(rows));
}

ParameterizedTest(int *row, grammar_schema, refuses)
{
    const struct refuse_case *tc = &refuse_cases[*row];
    enum gs_status st;
    struct gs_err err = {0};
    char *g = convert(tc->schema, &st, &err);
    cr_assert_eq(st, GS_INVAL, "%s: status %d, grammar:\n%s", tc->name, st, g ? g : "");
    cr_assert_eq(err.code, GS_INVAL);
    size_t n = strlen(tc->msg);
    if (tc->msg[n - 1] == '*')
        cr_expect(!strncmp(err.msg, tc->msg, n - 1), "%s: got '%s'", tc->name, err.msg);
    else
        cr_expect_str_eq(err.msg, tc->msg, "%s", tc->name);
}

/* ---- limits ------------------------------------------------------------------ */

Test(grammar_schema, deep_nesting_is_refused_naming_the_limit)
{
    const size_t depth = 500;
    char *s = malloc(depth * 12 + 8);
    cr_assert(s);
    s[0] = '\0';
    for (size_t i = 0; i < depth; i++)
        strcat(s, "{\"items\": ");
    strcat(s, "{}");
    for (size_t i = 0; i < depth; i++)
        strcat(s, "}");
    enum gs_status st;
    struct gs_err err = {0};
    char *g = convert(s, &st, &err);
    cr_assert_eq(st, GS_INVAL);
    cr_expect(strstr(err.msg, "over the limit of 64 nested schemas at #/items/items"), "%s", err.msg);
    gs_free(g);
    free(s);
}

Test(grammar_schema, huge_counts_are_refused_or_tightened)
{
    enum gs_status st;
    struct gs_err err = {0};
    char *g = convert("{\"type\": \"array\", \"minItems\": 1000000000}", &st, &err);
    cr_assert_eq(st, GS_INVAL);
    cr_expect_str_eq(err.msg, "unsupported keyword 'minItems' at #: over the limit of 4096");
    g = convert("{\"type\": \"string\", \"minLength\": 1000000000}", &st, &err);
    cr_assert_eq(st, GS_INVAL);
    cr_expect_str_eq(err.msg, "unsupported keyword 'minLength' at #: over the limit of 4096");
    g = convert_ok("{\"type\": \"array\", \"maxItems\": 1000000000}");
    cr_expect(strstr(g, "){0,4095}"), "%s", g);
    gs_free(g);
    g = convert("{\"pattern\": \"^a{1,100000}$\"}", &st, &err);
    cr_assert_eq(st, GS_INVAL);
    cr_expect(strstr(err.msg, "unsupported keyword 'pattern' at #: a repetition count"), "%s",
              err.msg);
}

/* Each count costs the compiler a rule: 40 strings of maxLength 4096 would
 * be 160k rules, so their bounds are tightened together to fit the budget. */
Test(grammar_schema, repetition_budget_tightens_upper_bounds)
{
    json_t *props = json_object();
    char name[16];
    for (int i = 0; i < 40; i++) {
        snprintf(name, sizeof(name), "p%d", i);
        json_object_set_new(props, name, json_pack("{s:s,s:i,s:i}", "type", "string", "minLength",
                                                   2, "maxLength", 4096));
    }
    json_t *s = json_pack("{s:s,s:o}", "type", "object", "properties", props);
    char *g = NULL;
    struct gs_err err = {0};
    cr_assert_eq(gs_grammar_from_json_schema(s, &g, NULL, &err), GS_OK, "%s", err.msg);
    cr_expect(strstr(g, "char{2,819}"), "%s", g);
    struct gs_grammar *cg = NULL;
    cr_expect_eq(gs_grammar_compile(g, strlen(g), NULL, NULL, &cg, &err), GS_OK, "%s", err.msg);
    gs_grammar_unref(cg);
    gs_free(g);
    json_decref(s);
}

Test(grammar_schema, huge_enum_is_refused)
{
    json_t *vals = json_array();
    for (int i = 0; i < 5000; i++)
        json_array_append_new(vals, json_integer(i));
    json_t *s = json_pack("{s:o}", "enum", vals);
    char *g = NULL;
    struct gs_err err = {0};
    cr_assert_eq(gs_grammar_from_json_schema(s, &g, NULL, &err), GS_INVAL);
    cr_expect(strstr(err.msg, "over the limit of 4096 enum values"), "%s", err.msg);
    json_decref(s);
}

Test(grammar_schema, grammar_text_is_capped)
{
    /* 3000 values of 1000 bytes: 3 MB of grammar. */
    json_t *vals = json_array();
    char *big = malloc(1001);
    memset(big, 'x', 1000);
    big[1000] = '\0';
    for (int i = 0; i < 3000; i++) {
        snprintf(big, 12, "%011d", i);
        big[11] = 'x';
        json_array_append_new(vals, json_string(big));
    }
    free(big);
    json_t *s = json_pack("{s:o}", "enum", vals);
    char *g = NULL;
    struct gs_err err = {0};
    cr_assert_eq(gs_grammar_from_json_schema(s, &g, NULL, &err), GS_INVAL);
    cr_expect(strstr(err.msg, "over the limit of 1048576 bytes of grammar"), "%s", err.msg);
    json_decref(s);
}

/* Each definition refers to the previous one twice: inlined, 2^40 copies; as
 * one rule per target, linear. */
Test(grammar_schema, shared_refs_stay_linear)
{
    json_t *defs = json_object();
    json_object_set_new(defs, "d0", json_pack("{s:s}", "type", "string"));
    char name[16], ref[32];
    for (int i = 1; i <= 40; i++) {
        snprintf(name, sizeof(name), "d%d", i);
        snprintf(ref, sizeof(ref), "#/definitions/d%d", i - 1);
        json_object_set_new(defs, name,
                            json_pack("{s:s,s:[{s:s},{s:s}]}", "type", "array", "items", "$ref",
                                      ref, "$ref", ref));
    }
    json_t *s = json_pack("{s:o,s:s}", "definitions", defs, "$ref", "#/definitions/d40");
    char *g = NULL;
    size_t len;
    struct gs_err err = {0};
    cr_assert_eq(gs_grammar_from_json_schema(s, &g, &len, &err), GS_OK, "%s", err.msg);
    cr_expect(len < 20000, "grammar of %zu bytes", len);
    gs_free(g);
    json_decref(s);
}

/* The same through allOf, which must intersect (copy) its branches: bounded by
 * the merge limit, never exponential. */
Test(grammar_schema, exponential_all_of_hits_a_limit)
{
    json_t *defs = json_object();
    json_object_set_new(defs, "d0", json_pack("{s:s}", "type", "object"));
    char name[16], ref[32];
    for (int i = 1; i <= 40; i++) {
        snprintf(name, sizeof(name), "d%d", i);
        snprintf(ref, sizeof(ref), "#/definitions/d%d", i - 1);
        json_object_set_new(defs, name,
                            json_pack("{s:[{s:s},{s:s}]}", "allOf", "$ref", ref, "$ref", ref));
    }
    json_t *s = json_pack("{s:o,s:s}", "definitions", defs, "$ref", "#/definitions/d40");
    char *g = NULL;
    struct gs_err err = {0};
    double t0 = gs_now_ms();
    cr_assert_eq(gs_grammar_from_json_schema(s, &g, NULL, &err), GS_INVAL);
    cr_expect(strstr(err.msg, "over the limit of"), "%s", err.msg);
    cr_expect(gs_now_ms() - t0 < 2000, "took %.0f ms", gs_now_ms() - t0);
    json_decref(s);
}

Test(grammar_schema, out_of_memory_fails_cleanly)
{
    const char *text =
        "{\"definitions\": {\"p\": {\"type\": \"object\", \"properties\": {\"n\": {\"type\": "
        "\"integer\", \"minimum\": 3, \"maximum\": 300}, \"next\": {\"$ref\": "
        "\"#/definitions/p\"}}}}, \"type\": \"object\", \"properties\": {\"head\": {\"$ref\": "
        "\"#/definitions/p\"}, \"tags\": {\"type\": \"array\", \"items\": {\"type\": \"string\", "
        "\"pattern\": \"^[a-z]+$\"}}, \"kind\": {\"enum\": [\"a\", \"b\"]}}, \"required\": "
        "[\"kind\"], \"additionalProperties\": true, \"allOf\": [{\"properties\": "
        "{\"x\": {\"type\": \"boolean\"}}}]}";
    json_t *s = json_loads(text, 0, NULL);
    cr_assert(s);
    int n;
    for (n = 0; n < 10000; n++) {
        char *g = NULL;
        struct gs_err err = {0};
        gs_alloc_fail_after(n);
        enum gs_status st = gs_grammar_from_json_schema(s, &g, NULL, &err);
        gs_alloc_fail_after(-1);
        if (st == GS_OK) {
            gs_free(g);
            break;
        }
        cr_assert_eq(st, GS_NOMEM, "allocation %d: status %d: %s", n, st, err.msg);
        cr_assert(!g);
    }
    cr_expect(n > 5 && n < 10000, "succeeded after %d failing allocations", n);
    json_decref(s);
}

Test(grammar_schema, json_object_grammar)
{
    const char *g = gs_grammar_json_object_gbnf();
    cr_assert(!strncmp(g, "root ::= object\n", 16));
    cr_expect(strstr(g, "ws ::= ( \" \" | \"\\n\" [ \\t]{0,20} )?"));
    cr_expect(strstr(g, "value ::= object | array | string | number"));
}

/* ---- the shared schemas -------------------------------------------------------- */

Test(grammar_schema, shared_schemas_convert_or_name_a_keyword)
{
    const char *path = gs_test_shared_path("golden/schemas/schemas.jsonl");
    size_t len;
    char *text = gs_test_read_file(path, &len);
    const char *dump = getenv("GS_SCHEMA_DUMP_DIR");
    regex_t form;
    cr_assert(!regcomp(&form, "^unsupported keyword '[^']+' at #[^ ]*(: .+)?$", REG_EXTENDED));
    int total = 0, converted = 0;
    size_t biggest = 0;
    char biggest_id[128] = "";
    for (char *line = text, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        json_error_t jerr;
        json_t *rec = json_loads(line, 0, &jerr);
        cr_assert(rec, "line %d: %s", total + 1, jerr.text);
        const char *id = json_string_value(json_object_get(rec, "id"));
        json_t *schema = json_object_get(rec, "schema");
        cr_assert(id && schema, "line %d lacks id or schema", total + 1);
        total++;
        char *g = NULL;
        size_t glen = 0;
        struct gs_err err = {0};
        /* Speed is bench/'s to measure (gs-bench-grammar), never a test's. */
        enum gs_status st = gs_grammar_from_json_schema(schema, &g, &glen, &err);
        if (st == GS_OK) {
            converted++;
            cr_expect(!strncmp(g, "root ::= ", 9), "%s", id);
            if (glen > biggest) {
                biggest = glen;
                snprintf(biggest_id, sizeof(biggest_id), "%s", id);
            }
            if (dump) {
                char p[4096];
                snprintf(p, sizeof(p), "%s/%d.gbnf", dump, total);
                FILE *f = fopen(p, "w");
                cr_assert(f, "cannot write %s", p);
                fwrite(g, 1, glen, f);
                fclose(f);
            }
        } else {
            cr_expect_eq(st, GS_INVAL, "%s: status %d: %s", id, st, err.msg);
            cr_expect(!regexec(&form, err.msg, 0, NULL, 0),
                      "%s: the refusal does not name a keyword and path: '%s'", id, err.msg);
        }
        gs_free(g);
        json_decref(rec);
    }
    regfree(&form);
    free(text);
    cr_assert_eq(total, 200, "the shared file should hold 200 schemas, has %d", total);
    printf("grammar_schema: %d of %d shared schemas converted (%.1f%%); largest grammar %zu bytes "
           "(%s)\n",
           converted, total, 100.0 * converted / total, biggest, biggest_id);
}

/* ---- through the GBNF compiler and matcher -------------------------------------- */

static struct gs_grammar *compile_gbnf(const char *gbnf, const char *what)
{
    struct gs_grammar *g = NULL;
    struct gs_err err = {0};
    enum gs_status st = gs_grammar_compile(gbnf, strlen(gbnf), NULL, NULL, &g, &err);
    cr_assert_eq(st, GS_OK, "%s: the grammar does not compile: %s\n%s", what, err.msg, gbnf);
    return g;
}

/* Whether g accepts text as a complete sentence. */
static bool accepts(struct gs_grammar *g, const char *text)
{
    /* A one-token vocabulary: the matcher needs one, accept_bytes ignores it. */
    const char *piece[1] = {"x"};
    uint32_t len[1] = {1};
    struct gs_grammar_vocab *v;
    struct gs_err err;
    cr_assert_eq(gs_grammar_vocab_new(piece, len, 1, &v, &err), GS_OK);
    struct gs_grammar_matcher *m;
    cr_assert_eq(gs_grammar_matcher_new(g, v, &m, &err), GS_OK, "%s", err.msg);
    bool ok = gs_grammar_matcher_accept_bytes(m, text, strlen(text), &err) == GS_OK &&
              gs_grammar_matcher_can_end(m);
    gs_grammar_matcher_free(m);
    gs_grammar_vocab_free(v);
    return ok;
}

struct match_case {
    const char *name;
    const char *schema;
    const char *valid[6];   /* the grammar must accept each */
    const char *invalid[6]; /* each fails the schema: the grammar must reject it */
};

static const struct match_case match_cases[] = {
    /* A schema dependency of an optional property: the property is never
     * written, which meets it. */
    {"dependencies_schema_form",
     "{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\"}, \"b\": "
     "{\"type\": \"integer\"}, \"c\": {\"type\": \"integer\"}}, \"required\": [\"b\"], "
     "\"additionalProperties\": false, \"dependencies\": {\"a\": {\"required\": [\"c\"]}}}",
     {"{\"b\":1}", "{\"b\":1,\"c\":2}"},
     {"{\"a\":1,\"b\":1}", "{\"c\":2}"}},
    {"object_required_optional",
     "{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\"}, \"b\": {\"type\": "
     "\"string\"}}, \"required\": [\"b\"]}",
     {"{\"b\":\"x\"}", "{\"a\":1,\"b\":\"x\"}", "{ \"a\" : -3 ,\n    \"b\": \"\" }"},
     {"{\"a\":1}", "{\"b\":1}", "{}", "{\"a\":1,\"b\":\"x\"", "{\"a\":1,,\"b\":\"x\"}"}},
    {"integer_range", "{\"type\": \"integer\", \"minimum\": -5, \"maximum\": 120}",
     {"-5", "0", "120", "7", "99"},
     {"-6", "121", "1.5", "\"3\"", "007", "1000"}},
    {"number_half_open", "{\"type\": \"number\", \"minimum\": 0, \"exclusiveMaximum\": 1}",
     {"0", "0.5", "0.999", "0.0"},
     {"1", "1.0", "-0.1", "2", "-1"}},
    {"number_negative_exclusive", "{\"type\": \"number\", \"exclusiveMinimum\": -2, \"maximum\": -1}",
     {"-1", "-1.5", "-1.99"},
     {"-2", "-2.0", "0", "-0.5", "-3"}},
    {"number_decimal_bounds", "{\"type\": \"number\", \"minimum\": 0.0167, \"maximum\": 30}",
     {"0.0167", "0.02", "30", "5.5", "0.01670001"},
     {"0.0166", "30.5", "0.01", "0", "31", "-1"}},
    {"number_decimal_exclusive",
     "{\"type\": \"number\", \"exclusiveMinimum\": -1.5, \"exclusiveMaximum\": 0.25}",
     {"-1.49", "0", "0.249999", "-1", "0.1"},
     {"-1.5", "0.25", "0.2500001", "-2", "0.26"}},
    {"string_length", "{\"type\": \"string\", \"minLength\": 2, \"maxLength\": 3}",
     {"\"ab\"", "\"abc\"", "\"\\u00e9\\u00e9\"", "\"\xc3\xa9\xe2\x82\xac\"", "\"a\\n\""},
     {"\"a\"", "\"abcd\"", "\"\"", "\"\\ud83d\\ude00\""}},
    {"enum_values", "{\"enum\": [\"red\", 1, null, [1, 2], {\"k\": true}]}",
     {"\"red\"", "1", "null", "[1,2]", "{\"k\":true}"},
     {"\"blue\"", "2", "true", "[2,1]"}},
    {"array_bounds",
     "{\"type\": \"array\", \"items\": {\"type\": \"integer\"}, \"minItems\": 1, \"maxItems\": 2}",
     {"[1]", "[1, 2]", "[ 3 ]"},
     {"[]", "[1,2,3]", "[\"a\"]", "[1,]"}},
    {"prefix_items_closed",
     "{\"prefixItems\": [{\"type\": \"integer\"}, {\"type\": \"string\"}], \"items\": false}",
     {"[]", "[1]", "[1,\"a\"]"},
     {"[1,\"a\",2]", "[\"a\"]", "[1,2]"}},
    {"tuple_draft4_with_rest",
     "{\"type\": \"array\", \"items\": [{\"type\": \"integer\"}], \"additionalItems\": {\"type\": "
     "\"boolean\"}, \"minItems\": 2}",
     {"[1,true]", "[1,true,false]"},
     {"[1]", "[1,2]", "[true,true]"}},
    {"recursive_tree",
     "{\"type\": \"object\", \"properties\": {\"v\": {\"type\": \"integer\"}, \"kids\": {\"type\": "
     "\"array\", \"items\": {\"$ref\": \"#\"}}}, \"required\": [\"v\"]}",
     {"{\"v\":1}", "{\"v\":1,\"kids\":[{\"v\":2},{\"v\":3,\"kids\":[]}]}"},
     {"{\"kids\":[]}", "{\"v\":1,\"kids\":[{}]}", "{\"v\":1,\"kids\":[{\"v\":\"x\"}]}"}},
    {"defs_ref",
     "{\"$defs\": {\"p\": {\"type\": \"integer\", \"minimum\": 1}}, \"type\": \"array\", "
     "\"items\": {\"$ref\": \"#/$defs/p\"}}",
     {"[1,2,30]", "[]"},
     {"[0]", "[-1]"}},
    {"any_of", "{\"anyOf\": [{\"type\": \"string\", \"maxLength\": 1}, {\"type\": \"null\"}]}",
     {"\"x\"", "null", "\"\""},
     {"1", "\"xy\""}},
    {"one_of_discriminated",
     "{\"oneOf\": [{\"type\": \"object\", \"properties\": {\"k\": {\"const\": \"a\"}}, "
     "\"required\": [\"k\"]}, {\"type\": \"object\", \"properties\": {\"k\": {\"const\": \"b\"}, "
     "\"n\": {\"type\": \"integer\"}}, \"required\": [\"k\"]}]}",
     {"{\"k\":\"a\"}", "{\"k\":\"b\",\"n\":1}", "{\"k\":\"b\"}"},
     {"{\"k\":\"c\"}", "{\"k\":\"a\",\"n\":1}", "{}"}},
    {"all_of_merged",
     "{\"allOf\": [{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"string\"}}, "
     "\"required\": [\"a\"]}, {\"properties\": {\"b\": {\"type\": \"integer\", \"minimum\": 0}}}]}",
     {"{\"a\":\"x\"}", "{\"a\":\"x\",\"b\":1}"},
     {"{\"b\":1}", "{\"a\":\"x\",\"b\":-1}", "{\"a\":1}"}},
    {"additional_properties_schema",
     "{\"type\": \"object\", \"properties\": {\"id\": {\"type\": \"integer\"}}, "
     "\"additionalProperties\": {\"type\": \"string\"}}",
     {"{\"id\":1,\"x\":\"s\"}", "{\"i\":\"s\"}", "{\"idx\":\"s\"}", "{\"x\":\"a\",\"y\":\"b\"}", "{}"},
     {"{\"id\":\"s\"}", "{\"x\":1}", "{\"id\":1,\"id\":\"s\"}"}},
    {"additional_properties_true_alone", "{\"type\": \"object\", \"additionalProperties\": true}",
     {"{}", "{\"\":1}", "{\"k\":[true]}", "{\"a\":1,\"b\":{}}"},
     {"[]", "{\"a\"}"}},
    {"additional_properties_false",
     "{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"boolean\"}}, "
     "\"additionalProperties\": false}",
     {"{}", "{\"a\":true}"},
     {"{\"b\":1}", "{\"a\":true,\"b\":1}", "{\"a\":null}"}},
    {"format_date", "{\"type\": \"string\", \"format\": \"date\"}",
     {"\"2024-02-28\"", "\"1999-12-31\"", "\"2024-04-30\""},
     {"\"2024-13-01\"", "\"2024-02-30\"", "\"2024-04-31\"", "\"24-01-01\""}},
    {"format_date_time", "{\"type\": \"string\", \"format\": \"date-time\"}",
     {"\"2024-02-28T12:30:00Z\"", "\"2024-02-28T23:59:59.123+02:00\""},
     {"\"2024-02-28 12:30:00Z\"", "\"2024-02-28T24:00:00Z\"", "\"2024-02-28T12:30:00\""}},
    {"format_uuid", "{\"format\": \"uuid\"}",
     {"\"123e4567-e89b-12d3-a456-426614174000\""},
     {"\"123e4567e89b12d3a456426614174000\"", "\"123\""}},
    {"format_ipv4", "{\"format\": \"ipv4\"}",
     {"\"192.168.0.1\"", "\"255.255.255.255\"", "\"0.0.0.0\""},
     {"\"256.1.1.1\"", "\"1.2.3\"", "\"01.2.3.4\""}},
    {"pattern_anchored", "{\"type\": \"string\", \"pattern\": \"^[a-z]+-\\\\d{2}$\"}",
     {"\"ab-12\"", "\"z-00\""},
     {"\"ab-1\"", "\"AB-12\"", "\"ab-123\"", "\"-12\""}},
    {"pattern_search", "{\"type\": \"string\", \"pattern\": \"ab|^c\"}",
     {"\"xxabyy\"", "\"ab\"", "\"cat\""},
     {"\"ba\"", "\"acb\"", "\"\""}},
    {"pattern_quote_and_dot", "{\"pattern\": \"^a.\\\"$\"}",
     {"\"ax\\\"\"", "\"a\\\"\\\"\""},
     {"\"a\\n\\\"\"", "\"ax\""}},
    {"one_of_by_required",
     "{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\"}, \"b\": {\"type\": "
     "\"integer\"}, \"c\": {\"type\": \"boolean\"}}, \"additionalProperties\": false, \"oneOf\": "
     "[{\"required\": [\"a\"]}, {\"required\": [\"b\"]}]}",
     {"{\"a\":1}", "{\"b\":2,\"c\":true}", "{\"a\":1,\"c\":false}"},
     {"{\"a\":1,\"b\":2}", "{\"c\":true}", "{}"}},
    {"not_empty_forbids_a_property",
     "{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\"}, \"b\": {\"not\": "
     "{}}}}",
     {"{}", "{\"a\":1}"},
     {"{\"b\":1}", "{\"a\":1,\"b\":null}"}},
    {"min_properties_promotes_optional",
     "{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\"}, \"b\": {\"type\": "
     "\"integer\"}}, \"minProperties\": 1}",
     {"{\"a\":1}", "{\"a\":1,\"b\":2}"},
     {"{}"}},
    {"format_semver", "{\"format\": \"semver\"}",
     {"\"1.0.0\"", "\"10.20.3-rc1\""},
     {"\"1.0\"", "\"01.0.0\""}},
    {"pattern_with_lengths", "{\"pattern\": \"^x-\\\\d{1,8}$\", \"minLength\": 4, \"maxLength\": 5}",
     {"\"x-12\"", "\"x-123\""},
     {"\"x-1\"", "\"x-1234\"", "\"y-12\""}},
    {"pattern_within_lengths", "{\"pattern\": \"^[ab]{2,3}$\", \"minLength\": 1, \"maxLength\": 9}",
     {"\"ab\"", "\"bab\""},
     {"\"a\"", "\"abab\""}},
    {"type_union", "{\"type\": [\"string\", \"null\"], \"maxLength\": 2}",
     {"\"ab\"", "null"},
     {"\"abc\"", "1"}},
};

ParameterizedTestParameters(grammar_schema, matches)
{
    static int rows[GS_ARRAY_LEN(match_cases)];
    for (size_t i = 0; i < GS_ARRAY_LEN(rows); i++)
        rows[i] = (int)i;
    return cr_make_param_array(int, rows, GS_ARRAY_LEN(rows));
}

ParameterizedTest(int *row, grammar_schema, matches)
{
    const struct match_case *tc = &match_cases[*row];
    char *gbnf = convert_ok(tc->schema);
    struct gs_grammar *g = compile_gbnf(gbnf, tc->name);
    for (size_t i = 0; i < GS_ARRAY_LEN(tc->valid) && tc->valid[i]; i++)
        cr_expect(accepts(g, tc->valid[i]), "%s: rejects valid %s\n%s", tc->name, tc->valid[i], gbnf);
    for (size_t i = 0; i < GS_ARRAY_LEN(tc->invalid) && tc->invalid[i]; i++)
        cr_expect(!accepts(g, tc->invalid[i]), "%s: accepts invalid %s\n%s", tc->name,
                  tc->invalid[i], gbnf);
    gs_grammar_unref(g);
    gs_free(gbnf);
}

Test(grammar_schema, whitespace_is_bounded)
{
    char *gbnf = convert_ok("{\"type\": \"array\"}");
    struct gs_grammar *g = compile_gbnf(gbnf, "array");
    cr_expect(accepts(g, "[ 1 ,\n    2 ]"));
    cr_expect(accepts(g, "[1]\n"));
    char spaces[64] = "[";
    memset(spaces + 1, ' ', 30);
    strcpy(spaces + 31, "]");
    cr_expect(!accepts(g, spaces), "thirty spaces accepted");
    cr_expect(!accepts(g, " [1]"), "leading whitespace accepted");
    gs_grammar_unref(g);
    gs_free(gbnf);
}

Test(grammar_schema, json_object_grammar_matches_objects_only)
{
    struct gs_grammar *g = compile_gbnf(gs_grammar_json_object_gbnf(), "json_object");
    cr_expect(accepts(g, "{}"));
    cr_expect(accepts(g, "{\"a\": [1, {\"b\": null}, -2.5e3], \"c\": \"\\u00e9\\n\", \"d\": true}"));
    cr_expect(!accepts(g, "[]"));
    cr_expect(!accepts(g, "\"x\""));
    cr_expect(!accepts(g, "{\"a\":}"));
    cr_expect(!accepts(g, "{\"a\":1,}"));
    gs_grammar_unref(g);
}

/* Every converted shared schema compiles; the slowest compile is printed (the
 * issue's goal is under 50 ms each, in an optimised build). */
Test(grammar_schema, shared_grammars_compile)
{
    const char *path = gs_test_shared_path("golden/schemas/schemas.jsonl");
    char *text = gs_test_read_file(path, NULL);
    int compiled = 0;
    double worst_ms = 0;
    char worst_id[128] = "";
    uint32_t worst_rules = 0, worst_el = 0;
    for (char *line = text, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        json_t *rec = json_loads(line, 0, NULL);
        cr_assert(rec);
        char *gbnf = NULL;
        size_t len;
        struct gs_err err = {0};
        if (gs_grammar_from_json_schema(json_object_get(rec, "schema"), &gbnf, &len, &err) ==
            GS_OK) {
            const char *id = json_string_value(json_object_get(rec, "id"));
            struct gs_grammar *g = NULL;
            double t0 = gs_now_ms();
            enum gs_status st = gs_grammar_compile(gbnf, len, NULL, NULL, &g, &err);
            double ms = gs_now_ms() - t0;
            cr_expect_eq(st, GS_OK, "%s: %s", id, err.msg);
            if (st == GS_OK) {
                compiled++;
                if (ms > worst_ms) {
                    worst_ms = ms;
                    snprintf(worst_id, sizeof(worst_id), "%s", id);
                    worst_rules = gs_grammar_n_rules(g);
                    worst_el = gs_grammar_n_elements(g);
                }
            }
            gs_grammar_unref(g);
        }
        gs_free(gbnf);
        json_decref(rec);
    }
    free(text);
    printf("grammar_schema: %d grammars compiled; slowest %.2f ms (%s: %u rules, %u elements)\n",
           compiled, worst_ms, worst_id, worst_rules, worst_el);
}
