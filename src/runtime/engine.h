#pragma once
// The engine with its parts complete (m3/engine.h declares them opaque): for src/ and the tests.
#include "base/thread_pool.h"
#include "io/model_config.h"
#include "io/safetensors.h"
#include "m3/engine.h"
#include "m3/tokenizer.h"
#include "model/text_model.h"
#include "vision/vision_tower.h"
