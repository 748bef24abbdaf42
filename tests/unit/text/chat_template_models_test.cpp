// The chat templates of the real model directories in ../shared/data (Qwen2.5, Qwen3, Llama 3.2,
// Mistral, Gemma 2/3, DeepSeek R1, Phi-3, SmolLM3, gpt-oss, TinyLlama), loaded the way
// transformers finds them and rendered for several conversations. Expected renderings were
// produced by Python jinja2 configured as transformers does (see
// chat_template_models_cases.py beside this file). On top of exact equality, each simple
// rendering is checked for structure: the user text is there and the generation prompt ends it.

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "model/text/chat_template.hpp"
#include "tests/support/test_support.hpp"

namespace brigade::model::text {
namespace {

using nlohmann::ordered_json;

constexpr const char* kExpected = R"JSON(
{
 "conversations": {
  "simple": {
   "messages": [
    {
     "role": "user",
     "content": "Hello from Brigade é 日本"
    }
   ]
  },
  "multi_turn": {
   "messages": [
    {
     "role": "user",
     "content": "Hi"
    },
    {
     "role": "assistant",
     "content": "Hello."
    },
    {
     "role": "user",
     "content": "What is 2+2?"
    }
   ]
  },
  "system": {
   "messages": [
    {
     "role": "system",
     "content": "Be terse."
    },
    {
     "role": "user",
     "content": "Hi"
    }
   ]
  },
  "no_prompt": {
   "messages": [
    {
     "role": "user",
     "content": "Hi"
    },
    {
     "role": "assistant",
     "content": "Hey"
    }
   ],
   "add_generation_prompt": false
  },
  "tools": {
   "messages": [
    {
     "role": "user",
     "content": "Weather in Paris?"
    },
    {
     "role": "assistant",
     "content": "",
     "tool_calls": [
      {
       "id": "call12345",
       "type": "function",
       "function": {
        "name": "get_weather",
        "arguments": {
         "city": "Paris"
        }
       }
      }
     ]
    },
    {
     "role": "tool",
     "tool_call_id": "call12345",
     "name": "get_weather",
     "content": "21 C"
    }
   ],
   "tools": [
    {
     "type": "function",
     "function": {
      "name": "get_weather",
      "description": "Weather for a city",
      "parameters": {
       "type": "object",
       "properties": {
        "city": {
         "type": "string"
        }
       },
       "required": [
        "city"
       ]
      }
     }
    }
   ]
  },
  "thinking_off": {
   "messages": [
    {
     "role": "user",
     "content": "Quick?"
    }
   ],
   "enable_thinking": false
  },
  "tools_string_args": {
   "messages": [
    {
     "role": "user",
     "content": "Weather in Paris?"
    },
    {
     "role": "assistant",
     "content": "",
     "tool_calls": [
      {
       "id": "call12345",
       "type": "function",
       "function": {
        "name": "get_weather",
        "arguments": "{\"city\": \"Paris\"}"
       }
      }
     ]
    },
    {
     "role": "tool",
     "tool_call_id": "call12345",
     "name": "get_weather",
     "content": "21 C"
    }
   ],
   "tools": [
    {
     "type": "function",
     "function": {
      "name": "get_weather",
      "description": "Weather for a city",
      "parameters": {
       "type": "object",
       "properties": {
        "city": {
         "type": "string"
        }
       },
       "required": [
        "city"
       ]
      }
     }
    }
   ]
  }
 },
 "models": {
  "qwen2.5": {
   "simple": {
    "rendered": "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n<|im_start|>user\nHello from Brigade é 日本<|im_end|>\n<|im_start|>assistant\n"
   },
   "multi_turn": {
    "rendered": "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"
   },
   "system": {
    "rendered": "<|im_start|>system\nBe terse.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
   },
   "no_prompt": {
    "rendered": "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHey<|im_end|>\n"
   },
   "tools": {
    "rendered": "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Weather for a city\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": [\"city\"]}}}\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n21 C\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
   },
   "thinking_off": {
    "rendered": "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n<|im_start|>user\nQuick?<|im_end|>\n<|im_start|>assistant\n"
   },
   "tools_string_args": {
    "rendered": "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Weather for a city\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": [\"city\"]}}}\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": \\\"Paris\\\"}\"}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n21 C\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
   }
  },
  "qwen3": {
   "simple": {
    "rendered": "<|im_start|>user\nHello from Brigade é 日本<|im_end|>\n<|im_start|>assistant\n"
   },
   "multi_turn": {
    "rendered": "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"
   },
   "system": {
    "rendered": "<|im_start|>system\nBe terse.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
   },
   "no_prompt": {
    "rendered": "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nHey<|im_end|>\n"
   },
   "tools": {
    "rendered": "<|im_start|>system\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Weather for a city\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": [\"city\"]}}}\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n21 C\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
   },
   "thinking_off": {
    "rendered": "<|im_start|>user\nQuick?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
   },
   "tools_string_args": {
    "rendered": "<|im_start|>system\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Weather for a city\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": [\"city\"]}}}\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n21 C\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
   }
  },
  "qwen3/Qwen3-4B-Instruct-2507": {
   "simple": {
    "rendered": "<|im_start|>user\nHello from Brigade é 日本<|im_end|>\n<|im_start|>assistant\n"
   },
   "multi_turn": {
    "rendered": "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"
   },
   "system": {
    "rendered": "<|im_start|>system\nBe terse.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
   },
   "no_prompt": {
    "rendered": "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHey<|im_end|>\n"
   },
   "tools": {
    "rendered": "<|im_start|>system\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Weather for a city\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": [\"city\"]}}}\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n21 C\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
   },
   "thinking_off": {
    "rendered": "<|im_start|>user\nQuick?<|im_end|>\n<|im_start|>assistant\n"
   },
   "tools_string_args": {
    "rendered": "<|im_start|>system\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Weather for a city\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": [\"city\"]}}}\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n21 C\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
   }
  },
  "llama3/Llama-3.2-3B-Instruct": {
   "simple": {
    "rendered": "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 21 Nov 2026\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHello from Brigade é 日本<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
   },
   "multi_turn": {
    "rendered": "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 21 Nov 2026\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
   },
   "system": {
    "rendered": "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 21 Nov 2026\n\nBe terse.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
   },
   "no_prompt": {
    "rendered": "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 21 Nov 2026\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHey<|eot_id|>"
   },
   "tools": {
    "rendered": "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\nCutting Knowledge Date: December 2023\nToday Date: 21 Nov 2026\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nGiven the following functions, please respond with a JSON for a function call with its proper arguments that best answers the given prompt.\n\nRespond in the format {\"name\": function name, \"parameters\": dictionary of argument name and its value}.Do not use variables.\n\n{\n    \"type\": \"function\",\n    \"function\": {\n        \"name\": \"get_weather\",\n        \"description\": \"Weather for a city\",\n        \"parameters\": {\n            \"type\": \"object\",\n            \"properties\": {\n                \"city\": {\n                    \"type\": \"string\"\n                }\n            },\n            \"required\": [\n                \"city\"\n            ]\n        }\n    }\n}\n\nWeather in Paris?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}<|eot_id|><|start_header_id|>ipython<|end_header_id|>\n\n\"21 C\"<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
   },
   "thinking_off": {
    "rendered": "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 21 Nov 2026\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nQuick?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
   },
   "tools_string_args": {
    "rendered": "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\nCutting Knowledge Date: December 2023\nToday Date: 21 Nov 2026\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nGiven the following functions, please respond with a JSON for a function call with its proper arguments that best answers the given prompt.\n\nRespond in the format {\"name\": function name, \"parameters\": dictionary of argument name and its value}.Do not use variables.\n\n{\n    \"type\": \"function\",\n    \"function\": {\n        \"name\": \"get_weather\",\n        \"description\": \"Weather for a city\",\n        \"parameters\": {\n            \"type\": \"object\",\n            \"properties\": {\n                \"city\": {\n                    \"type\": \"string\"\n                }\n            },\n            \"required\": [\n                \"city\"\n            ]\n        }\n    }\n}\n\nWeather in Paris?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"get_weather\", \"parameters\": \"{\\\"city\\\": \\\"Paris\\\"}\"}<|eot_id|><|start_header_id|>ipython<|end_header_id|>\n\n\"21 C\"<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
   }
  },
  "mistral-7b-instruct-v0.2": {
   "simple": {
    "rendered": "<s>[INST] Hello from Brigade é 日本 [/INST]"
   },
   "multi_turn": {
    "rendered": "<s>[INST] Hi [/INST]Hello.</s>[INST] What is 2+2? [/INST]"
   },
   "system": {
    "error": "TemplateError: Conversation roles must alternate user/assistant/user/assistant/..."
   },
   "no_prompt": {
    "rendered": "<s>[INST] Hi [/INST]Hey</s>"
   },
   "tools": {
    "error": "TemplateError: Conversation roles must alternate user/assistant/user/assistant/..."
   },
   "thinking_off": {
    "rendered": "<s>[INST] Quick? [/INST]"
   },
   "tools_string_args": {
    "error": "TemplateError: Conversation roles must alternate user/assistant/user/assistant/..."
   }
  },
  "gemma2": {
   "simple": {
    "rendered": "<bos><start_of_turn>user\nHello from Brigade é 日本<end_of_turn>\n<start_of_turn>model\n"
   },
   "multi_turn": {
    "rendered": "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\nHello.<end_of_turn>\n<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n"
   },
   "system": {
    "error": "TemplateError: System role not supported"
   },
   "no_prompt": {
    "rendered": "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\nHey<end_of_turn>\n"
   },
   "tools": {
    "error": "TemplateError: Conversation roles must alternate user/assistant/user/assistant/..."
   },
   "thinking_off": {
    "rendered": "<bos><start_of_turn>user\nQuick?<end_of_turn>\n<start_of_turn>model\n"
   },
   "tools_string_args": {
    "error": "TemplateError: Conversation roles must alternate user/assistant/user/assistant/..."
   }
  },
  "gemma3": {
   "simple": {
    "rendered": "<bos><start_of_turn>user\nHello from Brigade é 日本<end_of_turn>\n<start_of_turn>model\n"
   },
   "multi_turn": {
    "rendered": "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\nHello.<end_of_turn>\n<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n"
   },
   "system": {
    "rendered": "<bos><start_of_turn>user\nBe terse.\n\nHi<end_of_turn>\n<start_of_turn>model\n"
   },
   "no_prompt": {
    "rendered": "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\nHey<end_of_turn>\n"
   },
   "tools": {
    "error": "TemplateError: Conversation roles must alternate user/assistant/user/assistant/..."
   },
   "thinking_off": {
    "rendered": "<bos><start_of_turn>user\nQuick?<end_of_turn>\n<start_of_turn>model\n"
   },
   "tools_string_args": {
    "error": "TemplateError: Conversation roles must alternate user/assistant/user/assistant/..."
   }
  },
  "deepseek-r1": {
   "simple": {
    "rendered": "<｜begin▁of▁sentence｜><｜User｜>Hello from Brigade é 日本<｜Assistant｜>"
   },
   "multi_turn": {
    "rendered": "<｜begin▁of▁sentence｜><｜User｜>Hi<｜Assistant｜>Hello.<｜end▁of▁sentence｜><｜User｜>What is 2+2?<｜Assistant｜>"
   },
   "system": {
    "rendered": "<｜begin▁of▁sentence｜>Be terse.<｜User｜>Hi<｜Assistant｜>"
   },
   "no_prompt": {
    "rendered": "<｜begin▁of▁sentence｜><｜User｜>Hi<｜Assistant｜>Hey<｜end▁of▁sentence｜>"
   },
   "tools": {
    "error": "TypeError: can only concatenate str (not \"dict\") to str"
   },
   "thinking_off": {
    "rendered": "<｜begin▁of▁sentence｜><｜User｜>Quick?<｜Assistant｜>"
   },
   "tools_string_args": {
    "rendered": "<｜begin▁of▁sentence｜><｜User｜>Weather in Paris?<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Paris\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜><｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>21 C<｜tool▁output▁end｜><｜tool▁outputs▁end｜>"
   }
  },
  "deepseek-r1-distill-qwen": {
   "simple": {
    "rendered": "<｜begin▁of▁sentence｜><｜User｜>Hello from Brigade é 日本<｜Assistant｜><think>\n"
   },
   "multi_turn": {
    "rendered": "<｜begin▁of▁sentence｜><｜User｜>Hi<｜Assistant｜>Hello.<｜end▁of▁sentence｜><｜User｜>What is 2+2?<｜Assistant｜><think>\n"
   },
   "system": {
    "rendered": "<｜begin▁of▁sentence｜>Be terse.<｜User｜>Hi<｜Assistant｜><think>\n"
   },
   "no_prompt": {
    "rendered": "<｜begin▁of▁sentence｜><｜User｜>Hi<｜Assistant｜>Hey<｜end▁of▁sentence｜>"
   },
   "tools": {
    "rendered": "<｜begin▁of▁sentence｜><｜User｜>Weather in Paris?<｜Assistant｜><｜end▁of▁sentence｜><｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>21 C<｜tool▁output▁end｜><｜tool▁outputs▁end｜>"
   },
   "thinking_off": {
    "rendered": "<｜begin▁of▁sentence｜><｜User｜>Quick?<｜Assistant｜><think>\n"
   },
   "tools_string_args": {
    "rendered": "<｜begin▁of▁sentence｜><｜User｜>Weather in Paris?<｜Assistant｜><｜end▁of▁sentence｜><｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>21 C<｜tool▁output▁end｜><｜tool▁outputs▁end｜>"
   }
  },
  "phi-3": {
   "simple": {
    "rendered": "<|user|>\nHello from Brigade é 日本<|end|>\n<|assistant|>\n"
   },
   "multi_turn": {
    "rendered": "<|user|>\nHi<|end|>\n<|assistant|>\nHello.<|end|>\n<|user|>\nWhat is 2+2?<|end|>\n<|assistant|>\n"
   },
   "system": {
    "rendered": "<|system|>\nBe terse.<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\n"
   },
   "no_prompt": {
    "rendered": "<|user|>\nHi<|end|>\n<|assistant|>\nHey<|end|>\n<|endoftext|>"
   },
   "tools": {
    "rendered": "<|user|>\nWeather in Paris?<|end|>\n<|assistant|>\n<|end|>\n<|assistant|>\n"
   },
   "thinking_off": {
    "rendered": "<|user|>\nQuick?<|end|>\n<|assistant|>\n"
   },
   "tools_string_args": {
    "rendered": "<|user|>\nWeather in Paris?<|end|>\n<|assistant|>\n<|end|>\n<|assistant|>\n"
   }
  },
  "phi-3/phi-3-mini-128k-instruct": {
   "simple": {
    "rendered": "<|user|>\nHello from Brigade é 日本<|end|>\n<|assistant|>\n"
   },
   "multi_turn": {
    "rendered": "<|user|>\nHi<|end|>\n<|assistant|>\nHello.<|end|>\n<|user|>\nWhat is 2+2?<|end|>\n<|assistant|>\n"
   },
   "system": {
    "rendered": "<|system|>\nBe terse.<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\n"
   },
   "no_prompt": {
    "rendered": "<|user|>\nHi<|end|>\n<|assistant|>\nHey<|end|>\n<|endoftext|>"
   },
   "tools": {
    "rendered": "<|user|>\nWeather in Paris?<|end|>\n<|assistant|>\n<|end|>\n<|assistant|>\n"
   },
   "thinking_off": {
    "rendered": "<|user|>\nQuick?<|end|>\n<|assistant|>\n"
   },
   "tools_string_args": {
    "rendered": "<|user|>\nWeather in Paris?<|end|>\n<|assistant|>\n<|end|>\n<|assistant|>\n"
   }
  },
  "smollm3": {
   "simple": {
    "rendered": "<|im_start|>system\n## Metadata\n\nKnowledge Cutoff Date: June 2025\nToday Date: 21 Nov 2026\nReasoning Mode: /think\n\n## Custom Instructions\n\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face. Your role as an assistant involves thoroughly exploring questions through a systematic thinking process before providing the final precise and accurate solutions. This requires engaging in a comprehensive cycle of analysis, summarizing, exploration, reassessment, reflection, backtracking, and iteration to develop well-considered thinking process. Please structure your response into two main sections: Thought and Solution using the specified format: <think> Thought section </think> Solution section. In the Thought section, detail your reasoning process in steps. Each step should include detailed considerations such as analysing questions, summarizing relevant findings, brainstorming new ideas, verifying the accuracy of the current steps, refining any errors, and revisiting previous steps. In the Solution section, based on various attempts, explorations, and reflections from the Thought section, systematically present the final solution that you deem correct. The Solution section should be logical, accurate, and concise and detail necessary steps needed to reach the conclusion.\n\n<|im_start|>user\nHello from Brigade é 日本<|im_end|>\n<|im_start|>assistant\n"
   },
   "multi_turn": {
    "rendered": "<|im_start|>system\n## Metadata\n\nKnowledge Cutoff Date: June 2025\nToday Date: 21 Nov 2026\nReasoning Mode: /think\n\n## Custom Instructions\n\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face. Your role as an assistant involves thoroughly exploring questions through a systematic thinking process before providing the final precise and accurate solutions. This requires engaging in a comprehensive cycle of analysis, summarizing, exploration, reassessment, reflection, backtracking, and iteration to develop well-considered thinking process. Please structure your response into two main sections: Thought and Solution using the specified format: <think> Thought section </think> Solution section. In the Thought section, detail your reasoning process in steps. Each step should include detailed considerations such as analysing questions, summarizing relevant findings, brainstorming new ideas, verifying the accuracy of the current steps, refining any errors, and revisiting previous steps. In the Solution section, based on various attempts, explorations, and reflections from the Thought section, systematically present the final solution that you deem correct. The Solution section should be logical, accurate, and concise and detail necessary steps needed to reach the conclusion.\n\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"
   },
   "system": {
    "rendered": "<|im_start|>system\n## Metadata\n\nKnowledge Cutoff Date: June 2025\nToday Date: 21 Nov 2026\nReasoning Mode: /think\n\n## Custom Instructions\n\nBe terse.\n\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
   },
   "no_prompt": {
    "rendered": "<|im_start|>system\n## Metadata\n\nKnowledge Cutoff Date: June 2025\nToday Date: 21 Nov 2026\nReasoning Mode: /think\n\n## Custom Instructions\n\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face. Your role as an assistant involves thoroughly exploring questions through a systematic thinking process before providing the final precise and accurate solutions. This requires engaging in a comprehensive cycle of analysis, summarizing, exploration, reassessment, reflection, backtracking, and iteration to develop well-considered thinking process. Please structure your response into two main sections: Thought and Solution using the specified format: <think> Thought section </think> Solution section. In the Thought section, detail your reasoning process in steps. Each step should include detailed considerations such as analysing questions, summarizing relevant findings, brainstorming new ideas, verifying the accuracy of the current steps, refining any errors, and revisiting previous steps. In the Solution section, based on various attempts, explorations, and reflections from the Thought section, systematically present the final solution that you deem correct. The Solution section should be logical, accurate, and concise and detail necessary steps needed to reach the conclusion.\n\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHey<|im_end|>\n"
   },
   "tools": {
    "rendered": "<|im_start|>system\n## Metadata\n\nKnowledge Cutoff Date: June 2025\nToday Date: 21 Nov 2026\nReasoning Mode: /think\n\n## Custom Instructions\n\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face. Your role as an assistant involves thoroughly exploring questions through a systematic thinking process before providing the final precise and accurate solutions. This requires engaging in a comprehensive cycle of analysis, summarizing, exploration, reassessment, reflection, backtracking, and iteration to develop well-considered thinking process. Please structure your response into two main sections: Thought and Solution using the specified format: <think> Thought section </think> Solution section. In the Thought section, detail your reasoning process in steps. Each step should include detailed considerations such as analysing questions, summarizing relevant findings, brainstorming new ideas, verifying the accuracy of the current steps, refining any errors, and revisiting previous steps. In the Solution section, based on various attempts, explorations, and reflections from the Thought section, systematically present the final solution that you deem correct. The Solution section should be logical, accurate, and concise and detail necessary steps needed to reach the conclusion.\n\n### Tools\n\nYou may call one or more functions to assist with the user query.\nYou are provided with function signatures within <tools></tools> XML tags:\n\n<tools>\n{'type': 'function', 'function': {'name': 'get_weather', 'description': 'Weather for a city', 'parameters': {'type': 'object', 'properties': {'city': {'type': 'string'}}, 'required': ['city']}}}\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>\n\n<|im_end|>\n<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n<|im_end|>\n<|im_start|>user\n21 C<|im_end|>\n<|im_start|>assistant\n"
   },
   "thinking_off": {
    "rendered": "<|im_start|>system\n## Metadata\n\nKnowledge Cutoff Date: June 2025\nToday Date: 21 Nov 2026\nReasoning Mode: /no_think\n\n## Custom Instructions\n\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face.\n\n<|im_start|>user\nQuick?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n"
   },
   "tools_string_args": {
    "rendered": "<|im_start|>system\n## Metadata\n\nKnowledge Cutoff Date: June 2025\nToday Date: 21 Nov 2026\nReasoning Mode: /think\n\n## Custom Instructions\n\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face. Your role as an assistant involves thoroughly exploring questions through a systematic thinking process before providing the final precise and accurate solutions. This requires engaging in a comprehensive cycle of analysis, summarizing, exploration, reassessment, reflection, backtracking, and iteration to develop well-considered thinking process. Please structure your response into two main sections: Thought and Solution using the specified format: <think> Thought section </think> Solution section. In the Thought section, detail your reasoning process in steps. Each step should include detailed considerations such as analysing questions, summarizing relevant findings, brainstorming new ideas, verifying the accuracy of the current steps, refining any errors, and revisiting previous steps. In the Solution section, based on various attempts, explorations, and reflections from the Thought section, systematically present the final solution that you deem correct. The Solution section should be logical, accurate, and concise and detail necessary steps needed to reach the conclusion.\n\n### Tools\n\nYou may call one or more functions to assist with the user query.\nYou are provided with function signatures within <tools></tools> XML tags:\n\n<tools>\n{'type': 'function', 'function': {'name': 'get_weather', 'description': 'Weather for a city', 'parameters': {'type': 'object', 'properties': {'city': {'type': 'string'}}, 'required': ['city']}}}\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>\n\n<|im_end|>\n<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n<|im_end|>\n<|im_start|>user\n21 C<|im_end|>\n<|im_start|>assistant\n"
   }
  },
  "gpt-oss": {
   "simple": {
    "rendered": "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\nKnowledge cutoff: 2024-06\nCurrent date: 21 Nov 2026\n\nreasoning: medium\n\n# Valid channels: analysis, commentary, final. Channel must be included for every message.\nCalls to these tools must go to the commentary channel: 'functions'.<|end|><|start|>user<|message|>Hello from Brigade é 日本<|end|><|start|>assistant"
   },
   "multi_turn": {
    "rendered": "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\nKnowledge cutoff: 2024-06\nCurrent date: 21 Nov 2026\n\nreasoning: medium\n\n# Valid channels: analysis, commentary, final. Channel must be included for every message.\nCalls to these tools must go to the commentary channel: 'functions'.<|end|><|start|>user<|message|>Hi<|end|><|start|>assistant<|message|>Hello.<|end|><|start|>user<|message|>What is 2+2?<|end|><|start|>assistant"
   },
   "system": {
    "rendered": "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\nKnowledge cutoff: 2024-06\nCurrent date: 21 Nov 2026\n\nreasoning: medium\n\n# Valid channels: analysis, commentary, final. Channel must be included for every message.\nCalls to these tools must go to the commentary channel: 'functions'.<|end|><|start|>developer<|message|># Instructions\n\nBe terse.<|end|><|start|>user<|message|>Hi<|end|><|start|>assistant"
   },
   "no_prompt": {
    "rendered": "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\nKnowledge cutoff: 2024-06\nCurrent date: 21 Nov 2026\n\nreasoning: medium\n\n# Valid channels: analysis, commentary, final. Channel must be included for every message.\nCalls to these tools must go to the commentary channel: 'functions'.<|end|><|start|>user<|message|>Hi<|end|><|start|>assistant<|message|>Hey<|end|>"
   },
   "tools": {
    "error": "UndefinedError: 'dict object' has no attribute 'description'"
   },
   "thinking_off": {
    "rendered": "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\nKnowledge cutoff: 2024-06\nCurrent date: 21 Nov 2026\n\nreasoning: medium\n\n# Valid channels: analysis, commentary, final. Channel must be included for every message.\nCalls to these tools must go to the commentary channel: 'functions'.<|end|><|start|>user<|message|>Quick?<|end|><|start|>assistant"
   },
   "tools_string_args": {
    "error": "UndefinedError: 'dict object' has no attribute 'description'"
   }
  },
  "tinyllama": {
   "simple": {
    "rendered": "<|user|>\nHello from Brigade é 日本</s>\n<|assistant|>\n"
   },
   "multi_turn": {
    "rendered": "<|user|>\nHi</s>\n<|assistant|>\nHello.</s>\n<|user|>\nWhat is 2+2?</s>\n<|assistant|>\n"
   },
   "system": {
    "rendered": "<|system|>\nBe terse.</s>\n<|user|>\nHi</s>\n<|assistant|>\n"
   },
   "no_prompt": {
    "rendered": "<|user|>\nHi</s>\n<|assistant|>\nHey</s>\n"
   },
   "tools": {
    "rendered": "<|user|>\nWeather in Paris?</s>\n<|assistant|>\n</s>\n<|assistant|>\n"
   },
   "thinking_off": {
    "rendered": "<|user|>\nQuick?</s>\n<|assistant|>\n"
   },
   "tools_string_args": {
    "rendered": "<|user|>\nWeather in Paris?</s>\n<|assistant|>\n</s>\n<|assistant|>\n"
   }
  }
 }
}
)JSON";

const ordered_json& expected() {
    static const ordered_json j = ordered_json::parse(kExpected);
    return j;
}

Result<std::string> render(const ChatTemplate& ct, const ordered_json& conv, ToolArguments mode) {
    ChatTemplateInputs in;
    in.messages = conv["messages"];
    if (conv.contains("tools")) in.tools = conv["tools"];
    in.add_generation_prompt = conv.value("add_generation_prompt", true);
    if (conv.contains("enable_thinking")) in.extra["enable_thinking"] = conv["enable_thinking"];
    in.tool_arguments = mode;
    return ct.render(in);
}

Result<ChatTemplate> load(const std::string& model) {
    auto ct = ChatTemplate::load_from_dir(test::shared_data_dir() / model);
    if (!ct) return ct;
    JinjaRenderOptions options;
    options.strftime_now = [](std::string_view) { return std::string("21 Nov 2026"); };
    ct->set_render_options(options);
    return ct;
}

class ModelTemplates : public ::testing::Test {
protected:
    void SetUp() override {
        if (test::shared_data_dir().empty()) GTEST_SKIP() << "../shared/data is absent";
    }
};

TEST_F(ModelTemplates, RenderLikePythonJinja2) {
    const auto& convs = expected()["conversations"];
    for (auto m = expected()["models"].begin(); m != expected()["models"].end(); ++m) {
        auto ct = load(m.key());
        ASSERT_TRUE(ct.has_value()) << m.key() << ": " << ct.error().message;
        for (auto c = m.value().begin(); c != m.value().end(); ++c) {
            SCOPED_TRACE(m.key() + " / " + c.key());
            auto got = render(*ct, convs[c.key()], ToolArguments::as_given);
            if (c.value().contains("error")) {
                EXPECT_FALSE(got.has_value()) << "Python raised " << c.value()["error"];
                continue;
            }
            ASSERT_TRUE(got.has_value()) << got.error().message;
            EXPECT_EQ(*got, c.value()["rendered"].get<std::string>());
        }
    }
}

TEST_F(ModelTemplates, SimpleConversationHasUserTextAndGenerationPrompt) {
    struct Case {
        const char* model;
        const char* prompt_suffix;
        bool has_generation_prompt = true;  // Mistral v0.2 ends every user turn with [/INST]
    };
    const Case cases[] = {
        {"qwen2.5", "<|im_start|>assistant\n"},
        {"qwen3", "<|im_start|>assistant\n"},
        {"qwen3/Qwen3-4B-Instruct-2507", "<|im_start|>assistant\n"},
        {"llama3/Llama-3.2-3B-Instruct", "<|start_header_id|>assistant<|end_header_id|>\n\n"},
        {"mistral-7b-instruct-v0.2", "[/INST]", false},
        {"gemma2", "<start_of_turn>model\n"},
        {"gemma3", "<start_of_turn>model\n"},
        {"deepseek-r1", "<｜Assistant｜>"},
        {"deepseek-r1-distill-qwen", "<｜Assistant｜><think>\n"},
        {"phi-3", "<|assistant|>\n"},
        {"smollm3", "<|im_start|>assistant\n"},
        {"gpt-oss", "<|start|>assistant"},
        {"tinyllama", "<|assistant|>\n"},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(c.model);
        auto ct = load(c.model);
        ASSERT_TRUE(ct.has_value()) << ct.error().message;
        ChatTemplateInputs in;
        in.messages =
            ordered_json::parse(R"([{"role": "user", "content": "Hello from Brigade é 日本"}])");
        auto text = ct->render(in);
        ASSERT_TRUE(text.has_value()) << text.error().message;
        EXPECT_NE(text->find("Hello from Brigade é 日本"), std::string::npos) << *text;
        EXPECT_TRUE(text->ends_with(c.prompt_suffix)) << *text;
        in.add_generation_prompt = false;
        auto without = ct->render(in);
        ASSERT_TRUE(without.has_value()) << without.error().message;
        EXPECT_NE(without->ends_with(c.prompt_suffix), c.has_generation_prompt) << *without;
    }
}

TEST_F(ModelTemplates, SpecialTokensComeFromTokenizerConfig) {
    auto llama = load("llama3/Llama-3.2-3B-Instruct");
    ASSERT_TRUE(llama.has_value());
    EXPECT_EQ(llama->special_tokens()["bos_token"], "<|begin_of_text|>");
    auto r1 = load("deepseek-r1");  // {"content": ...} objects are unwrapped
    ASSERT_TRUE(r1.has_value());
    EXPECT_EQ(r1->special_tokens()["bos_token"], "<｜begin▁of▁sentence｜>");
    EXPECT_FALSE(r1->special_tokens().contains("unk_token"));  // null stays undefined
    auto qwen = load("qwen2.5");
    ASSERT_TRUE(qwen.has_value());
    EXPECT_FALSE(qwen->special_tokens().contains("bos_token"));
    EXPECT_EQ(qwen->special_tokens()["eos_token"], "<|im_end|>");
    // Caller overrides win over tokenizer_config.json.
    ChatTemplateInputs in;
    in.messages = ordered_json::parse(R"([{"role": "user", "content": "x"}])");
    in.extra["bos_token"] = "<BOS>";
    auto text = llama->render(in);
    ASSERT_TRUE(text.has_value());
    EXPECT_TRUE(text->starts_with("<BOS>")) << *text;
}

// OpenAI clients send tool-call arguments as JSON strings. Templates that print objects
// (Qwen2.5, Llama 3.2) get them parsed; DeepSeek R1, which concatenates strings, gets strings.
TEST_F(ModelTemplates, ToolCallArgumentsFollowWhatTheTemplateNeeds) {
    const auto& convs = expected()["conversations"];
    const auto& models = expected()["models"];
    for (const char* model : {"qwen2.5", "llama3/Llama-3.2-3B-Instruct", "qwen3"}) {
        SCOPED_TRACE(model);
        auto ct = load(model);
        ASSERT_TRUE(ct.has_value());
        EXPECT_TRUE(ct->caps().renders_object_arguments);
        auto got = render(*ct, convs["tools_string_args"], ToolArguments::automatic);
        ASSERT_TRUE(got.has_value()) << got.error().message;
        EXPECT_EQ(*got, models[model]["tools"]["rendered"].get<std::string>());
    }
    auto r1 = load("deepseek-r1");
    ASSERT_TRUE(r1.has_value());
    EXPECT_FALSE(r1->caps().renders_object_arguments);
    EXPECT_TRUE(r1->caps().renders_string_arguments);
    const std::string want =
        models["deepseek-r1"]["tools_string_args"]["rendered"].get<std::string>();
    for (const char* conv : {"tools", "tools_string_args"}) {
        auto got = render(*r1, convs[conv], ToolArguments::automatic);
        ASSERT_TRUE(got.has_value()) << conv << ": " << got.error().message;
        EXPECT_EQ(*got, want) << conv;
    }
    // Opting out passes arguments through, so DeepSeek fails on objects like HF does.
    EXPECT_FALSE(render(*r1, convs["tools"], ToolArguments::as_given).has_value());
}

TEST_F(ModelTemplates, ContentPartsAreFlattenedForTextOnlyTemplates) {
    auto phi = load("phi-3");
    ASSERT_TRUE(phi.has_value());
    EXPECT_FALSE(phi->caps().accepts_content_parts);
    auto qwen3 = load("qwen3/Qwen3-4B-Instruct-2507");
    ASSERT_TRUE(qwen3.has_value());
    ChatTemplateInputs parts;
    parts.messages = ordered_json::parse(
        R"([{"role": "user", "content": [{"type": "text", "text": "Hello "}, {"type": "text", "text": "parts"}]}])");
    ChatTemplateInputs plain;
    plain.messages = ordered_json::parse(R"([{"role": "user", "content": "Hello parts"}])");
    for (const ChatTemplate* ct : {&*phi, &*qwen3}) {
        auto a = ct->render(parts);
        auto b = ct->render(plain);
        ASSERT_TRUE(a.has_value()) << a.error().message;
        ASSERT_TRUE(b.has_value());
        EXPECT_EQ(*a, *b);
    }
}

}  // namespace
}  // namespace brigade::model::text
