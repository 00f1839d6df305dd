/* glibc has no xlocale.h since 2.26; the wheel's pg_config.h still asks for it. */
#include <locale.h>
