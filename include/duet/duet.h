/* duet/duet.h — everything. Include this, or the one layer you use. */
#ifndef DUET_DUET_H
#define DUET_DUET_H
#include "duet/base.h"
#include "duet/tensor.h"
#include "duet/autograd.h"
#include "duet/ops.h"
#include "duet/nn.h"
#if __has_include("duet/comm.h")
#include "duet/comm.h"
#endif
#if __has_include("duet/ddp.h")
#include "duet/ddp.h"
#endif
#if __has_include("duet/wrapper.h")
#include "duet/wrapper.h"
#endif
#if __has_include("duet/models.h")
#include "duet/models.h"
#endif
#if __has_include("duet/data.h")
#include "duet/data.h"
#endif
#if __has_include("duet/train.h")
#include "duet/train.h"
#endif
#endif
