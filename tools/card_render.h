/* card_render.h - a model card (audit/lineage.h's JSON) as Markdown for
 * people: `fedagg model card V` and `fedagg audit lineage V` print the
 * same page. */
#ifndef FA_TOOLS_CARD_RENDER_H
#define FA_TOOLS_CARD_RENDER_H

#include <stdio.h>

/* Writes the card to out.  Returns 0, or 1 when json is not a card (a
 * message on stderr). */
int fa_card_render_markdown(FILE *out, const char *json);

#endif
