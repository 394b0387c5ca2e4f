/* duet/duet.h — everything. Include this, or the one layer you use. */
#ifndef DUET_DUET_H
#define DUET_DUET_H
#include "duet/base.h"
#include "duet/tensor.h"
#include "duet/autograd.h"
#include "duet/ops.h"
#include "duet/nn.h"
#include "duet/comm.h"
#include "duet/ddp.h"
#include "duet/models.h"
#include "duet/wrapper.h"
#include "duet/data.h"
#include "duet/train.h"
#endif
