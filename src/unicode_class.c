/* unicode_class.c - UTF-8 decoding and a compact character-class table
 * (see unicode_class.h for what is approximated). */
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

/* Sorted, non-overlapping ranges; anything outside them is UC_OTHER. */
typedef struct uc_range { uint32_t lo, hi; uint8_t cls; } uc_range;

#define L UC_LETTER
#define N UC_NUMBER
#define S UC_SPACE
static const uc_range uc_table[] = {
    {0x0009, 0x000D, S}, {0x0020, 0x0020, S}, {0x0030, 0x0039, N},
    {0x0041, 0x005A, L}, {0x0061, 0x007A, L}, {0x0085, 0x0085, S},
    {0x00A0, 0x00A0, S}, {0x00AA, 0x00AA, L}, {0x00B2, 0x00B3, N},
    {0x00B5, 0x00B5, L}, {0x00B9, 0x00B9, N}, {0x00BA, 0x00BA, L},
    {0x00BC, 0x00BE, N}, {0x00C0, 0x00D6, L}, {0x00D8, 0x00F6, L},
    {0x00F8, 0x02C1, L}, {0x02C6, 0x02D1, L}, {0x02E0, 0x02E4, L},
    {0x02EC, 0x02EC, L}, {0x02EE, 0x02EE, L},
    /* Greek and Coptic */
    {0x0370, 0x0374, L}, {0x0376, 0x0377, L}, {0x037A, 0x037D, L},
    {0x037F, 0x037F, L}, {0x0386, 0x0386, L}, {0x0388, 0x038A, L},
    {0x038C, 0x038C, L}, {0x038E, 0x03A1, L}, {0x03A3, 0x03F5, L},
    /* Cyrillic (0x482-0x489: sign and combining marks) */
    {0x03F7, 0x0481, L}, {0x048A, 0x052F, L},
    /* Armenian, Hebrew, Arabic */
    {0x0531, 0x0556, L}, {0x0559, 0x0559, L}, {0x0560, 0x0588, L},
    {0x05D0, 0x05EA, L}, {0x05EF, 0x05F2, L}, {0x0620, 0x064A, L},
    {0x0660, 0x0669, N}, {0x066E, 0x066F, L}, {0x0671, 0x06D3, L},
    {0x06D5, 0x06D5, L}, {0x06E5, 0x06E6, L}, {0x06EE, 0x06EF, L},
    {0x06F0, 0x06F9, N}, {0x06FA, 0x06FC, L}, {0x06FF, 0x06FF, L},
    /* Devanagari, Bengali, Tamil (independent letters; vowel signs are marks) */
    {0x0904, 0x0939, L}, {0x093D, 0x093D, L}, {0x0950, 0x0950, L},
    {0x0958, 0x0961, L}, {0x0966, 0x096F, N}, {0x0971, 0x0980, L},
    {0x0985, 0x09B9, L}, {0x09E6, 0x09EF, N}, {0x0B85, 0x0BB9, L},
    {0x0BE6, 0x0BF2, N},
    /* Thai */
    {0x0E01, 0x0E30, L}, {0x0E32, 0x0E33, L}, {0x0E40, 0x0E46, L},
    {0x0E50, 0x0E59, N},
    /* Georgian, Hangul Jamo */
    {0x10A0, 0x10FA, L}, {0x10FC, 0x11FF, L},
    {0x1680, 0x1680, S},
    /* Latin Extended Additional, Greek Extended */
    {0x1E00, 0x1F15, L}, {0x1F18, 0x1F1D, L}, {0x1F20, 0x1F45, L},
    {0x1F48, 0x1F4D, L}, {0x1F50, 0x1F57, L}, {0x1F59, 0x1F7D, L},
    {0x1F80, 0x1FBC, L}, {0x1FBE, 0x1FBE, L}, {0x1FC2, 0x1FCC, L},
    {0x1FD0, 0x1FDB, L}, {0x1FE0, 0x1FEC, L}, {0x1FF2, 0x1FFC, L},
    /* General punctuation spaces, super/subscripts */
    {0x2000, 0x200A, S}, {0x2028, 0x2029, S}, {0x202F, 0x202F, S},
    {0x205F, 0x205F, S}, {0x2070, 0x2070, N}, {0x2071, 0x2071, L},
    {0x2074, 0x2079, N}, {0x207F, 0x207F, L}, {0x2080, 0x2089, N},
    {0x2090, 0x209C, L},
    /* Letterlike symbols (the letter ones), number forms */
    {0x2102, 0x2102, L}, {0x2107, 0x2107, L}, {0x210A, 0x2113, L},
    {0x2115, 0x2115, L}, {0x2119, 0x211D, L}, {0x2124, 0x2124, L},
    {0x2126, 0x2126, L}, {0x2128, 0x2128, L}, {0x212A, 0x212D, L},
    {0x212F, 0x2139, L}, {0x2150, 0x2182, N}, {0x2183, 0x2184, L},
    {0x2185, 0x2189, N},
    /* Enclosed and dingbat numbers */
    {0x2460, 0x249B, N}, {0x24EA, 0x24FF, N}, {0x2776, 0x2793, N},
    /* Glagolitic, Latin Extended-C, Coptic */
    {0x2C00, 0x2CE4, L},
    /* CJK symbols: ideographic space, iteration marks, numerals */
    {0x3000, 0x3000, S}, {0x3005, 0x3006, L}, {0x3007, 0x3007, N},
    {0x3021, 0x3029, N}, {0x3031, 0x3035, L}, {0x3038, 0x303A, N},
    {0x303B, 0x303C, L},
    /* Kana, Bopomofo, Hangul compatibility jamo */
    {0x3041, 0x3096, L}, {0x309D, 0x309F, L}, {0x30A1, 0x30FA, L},
    {0x30FC, 0x30FF, L}, {0x3105, 0x312F, L}, {0x3131, 0x318E, L},
    {0x3192, 0x3195, N}, {0x31A0, 0x31BF, L}, {0x31F0, 0x31FF, L},
    {0x3220, 0x3229, N}, {0x3248, 0x324F, N}, {0x3251, 0x325F, N},
    {0x3280, 0x3289, N}, {0x32B1, 0x32BF, N},
    /* CJK ideographs (extension A and the main block), Yi */
    {0x3400, 0x4DBF, L}, {0x4E00, 0xA48C, L},
    /* Cyrillic Extended-B, Latin Extended-D */
    {0xA640, 0xA66E, L}, {0xA680, 0xA69D, L}, {0xA722, 0xA788, L},
    {0xA78B, 0xA7CA, L},
    /* Hangul syllables, CJK compatibility ideographs */
    {0xAC00, 0xD7A3, L}, {0xF900, 0xFA6D, L}, {0xFA70, 0xFAD9, L},
    /* Alphabetic and Arabic presentation forms */
    {0xFB00, 0xFB06, L}, {0xFB13, 0xFB17, L}, {0xFB1D, 0xFB1D, L},
    {0xFB1F, 0xFB28, L}, {0xFB2A, 0xFBB1, L}, {0xFBD3, 0xFD3D, L},
    {0xFD50, 0xFDC7, L}, {0xFDF0, 0xFDFB, L}, {0xFE70, 0xFEFC, L},
    /* Fullwidth and halfwidth forms */
    {0xFF10, 0xFF19, N}, {0xFF21, 0xFF3A, L}, {0xFF41, 0xFF5A, L},
    {0xFF66, 0xFFBE, L}, {0xFFC2, 0xFFDC, L},
    /* Mathematical alphanumerics */
    {0x1D400, 0x1D7CB, L}, {0x1D7CE, 0x1D7FF, N},
    /* CJK extensions B-H and compatibility supplement */
    {0x20000, 0x2FA1F, L}, {0x30000, 0x323AF, L},
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
