-- kb's stand-in for contrib unaccent (unaccent.c): the dictionary `unaccent`.
CREATE FUNCTION unaccent_init(internal) RETURNS internal
    AS 'MODULE_PATHNAME', 'kb_unaccent_init' LANGUAGE C STRICT;
CREATE FUNCTION unaccent_lexize(internal, internal, internal, internal) RETURNS internal
    AS 'MODULE_PATHNAME', 'kb_unaccent_lexize' LANGUAGE C STRICT;
CREATE TEXT SEARCH TEMPLATE unaccent (INIT = unaccent_init, LEXIZE = unaccent_lexize);
CREATE TEXT SEARCH DICTIONARY unaccent (TEMPLATE = unaccent);
