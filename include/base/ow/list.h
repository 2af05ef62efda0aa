/*
 * An intrusive doubly linked list: a node lives inside the element it
 * links, so linking allocates nothing. A list is a node of its own, its
 * head, linked to itself when the list is empty; OW_LIST_ITEM gives the
 * element a node belongs to.
 */
#ifndef OW_LIST_H
#define OW_LIST_H

#include <stddef.h>

typedef struct ow_list {
    struct ow_list *prev, *next;
} ow_list;

#define OW_LIST_ITEM(node, type, member) ((type *)((char *)(node)-offsetof(type, member)))

void ow_list_init(ow_list *head);
int ow_list_empty(const ow_list *head);
/* Links n first (right after head). */
void ow_list_push(ow_list *head, ow_list *n);
/* Unlinks n; its own links then point to itself. */
void ow_list_remove(ow_list *n);

#endif
