#include "ow/list.h"

void ow_list_init(ow_list *head)
{
    head->prev = head->next = head;
}

int ow_list_empty(const ow_list *head)
{
    return head->next == head;
}

void ow_list_push(ow_list *head, ow_list *n)
{
    n->prev = head;
    n->next = head->next;
    head->next->prev = n;
    head->next = n;
}

void ow_list_remove(ow_list *n)
{
    n->prev->next = n->next;
    n->next->prev = n->prev;
    n->prev = n->next = n;
}
