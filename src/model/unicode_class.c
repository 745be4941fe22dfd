/* unicode_class.c - UTF-8 decoding and the character-class lookup (a
 * binary search in the generated range table). */
#include "unicode_class.h"

#define KVQ_UC_TABLE_LEN (sizeof(uc_table) / sizeof(uc_table[0]))

uint32_t uc_decode(const unsigned char *s, size_t n, int *len) {
    unsigned char c = s[0];
    int need;
    uint32_t cp, min;
    if (c < 0x80) { *len = 1; return c; }
    if ((c & 0xE0) == 0xC0) { need = 1; cp = c & 0x1Fu; min = 0x80; }
    else if ((c & 0xF0) == 0xE0) { need = 2; cp = c & 0x0Fu; min = 0x800; }
    else if ((c & 0xF8) == 0xF0) { need = 3; cp = c & 0x07u; min = 0x10000; }
    else { *len = 1; return 0xFFFD; }                /* stray continuation or 0xF8.. */
    if ((size_t)need >= n) { *len = 1; return 0xFFFD; }
    for (int i = 1; i <= need; i++) {
        if ((s[i] & 0xC0) != 0x80) { *len = 1; return 0xFFFD; }
        cp = (cp << 6) | (s[i] & 0x3Fu);
    }
    /* overlong forms, surrogates and values past U+10FFFF are malformed */
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) { *len = 1; return 0xFFFD; }
    *len = need + 1;
    return cp;
}

int uc_encode(uint32_t cp, char *out) {
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

typedef struct uc_range { uint32_t lo, hi; uint8_t cls; } uc_range;

#define L UC_LETTER
#define N UC_NUMBER
#define S UC_SPACE
static const uc_range uc_table[] = {
#include "unicode_class_table.h"
};
#undef L
#undef N
#undef S

uc_class uc_classify(uint32_t cp) {
    size_t lo = 0, hi = KVQ_UC_TABLE_LEN;
    while (lo < hi) {                                  /* first range with hi >= cp */
        size_t mid = (lo + hi) / 2;
        if (uc_table[mid].hi < cp) lo = mid + 1; else hi = mid;
    }
    if (lo < KVQ_UC_TABLE_LEN && uc_table[lo].lo <= cp) return (uc_class)uc_table[lo].cls;
    return UC_OTHER;
}

bool uc_table_is_sorted(void) {
    for (size_t i = 0; i < KVQ_UC_TABLE_LEN; i++) {
        if (uc_table[i].lo > uc_table[i].hi) return false;
        if (i > 0 && uc_table[i].lo <= uc_table[i - 1].hi) return false;
    }
    return true;
}
