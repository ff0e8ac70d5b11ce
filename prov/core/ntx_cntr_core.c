/*
 * The counter core (DESIGN §3, completions): progress bumps a counter
 * and raises its signal.
 */
#include "config.h"

#include "ntx/ntx_core.h"

void ntx_cntr_inc(struct ntx_cntr *c)
{
	atomic_fetch_add(&c->value, 1);
	ntx_signal_raise(&c->wait.sig);
}

void ntx_cntr_inc_err(struct ntx_cntr *c)
{
	atomic_fetch_add(&c->err, 1);
	ntx_signal_raise(&c->wait.sig);
}
