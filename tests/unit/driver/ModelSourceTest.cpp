// driver::ModelSource: --model and the file argument parsed once into one typed value (zoo spec,
// hf:PATH[,seq=S], ONNX, IR), binding a config's seq and batch, and the errors of each.
#include "driver/ModelSource.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace megac::driver {
namespace {

std::string writeConfig(const std::string &name, const std::string &json) {
  std::filesystem::path dir = std::filesystem::temp_directory_path() / ("megac_msrc_" + name);
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "config.json") << json;
  return dir.string();
}

const char *kTinyMistral = R"({"model_type": "mistral", "hidden_size": 32,
    "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 48,
    "num_hidden_layers": 1, "vocab_size": 64, "sliding_window": 16})";

TEST(ModelSource, ParsesEachKindOnce) {
  StatusOr<ModelSource> zoo =
      ModelSource::parse("gpt:layers=1,hidden=16,heads=2,seq=8,vocab=32", std::nullopt);
  ASSERT_TRUE(zoo.isOk()) << zoo.status().message();
  ASSERT_TRUE(std::holds_alternative<ZooSpec>(zoo->value()));
  EXPECT_EQ(zoo->config()->hidden, 16);
  EXPECT_FALSE(std::get<ZooSpec>(zoo->value()).batchGiven);
  EXPECT_EQ(zoo->file(), nullptr);

  StatusOr<ModelSource> onnx = ModelSource::parse(std::nullopt, "m.onnx");
  ASSERT_TRUE(onnx.isOk());
  EXPECT_TRUE(onnx->isOnnx());
  EXPECT_EQ(*onnx->file(), "m.onnx");
  EXPECT_EQ(onnx->config(), nullptr);
  StatusOr<ModelSource> ir = ModelSource::parse(std::nullopt, "m.mlir");
  ASSERT_TRUE(ir.isOk());
  EXPECT_TRUE(std::holds_alternative<IrFile>(ir->value()));

  std::string dir = writeConfig("parse", kTinyMistral);
  StatusOr<ModelSource> hf = ModelSource::parse("hf:" + dir + ",seq=8", std::nullopt);
  ASSERT_TRUE(hf.isOk()) << hf.status().message();
  ASSERT_TRUE(hf->isHf());
  EXPECT_EQ(std::get<HfSpec>(hf->value()).seq, 8);
  EXPECT_EQ(hf->config()->seq, 8);
  EXPECT_EQ(hf->config()->kvHeads, 2);
  EXPECT_EQ(hf->text(), "hf:" + dir + ",seq=8");
  // The config.json itself, and no seq (bound later from the data).
  StatusOr<ModelSource> file = ModelSource::parse("hf:" + dir + "/config.json", std::nullopt);
  ASSERT_TRUE(file.isOk()) << file.status().message();
  EXPECT_EQ(file->config()->seq, 0);
}

TEST(ModelSource, BindingChecksTheConfig) {
  std::string dir = writeConfig("bind", kTinyMistral);
  ModelSource hf = ModelSource::fromSpec("hf:" + dir).value();
  models::ModelConfig config = *hf.config();
  config.seq = 16;
  config.batch = 4;
  StatusOr<ModelSource> bound = hf.bound(config);
  ASSERT_TRUE(bound.isOk()) << bound.status().message();
  EXPECT_EQ(bound->config()->seq, 16);
  EXPECT_EQ(bound->config()->batch, 4);
  EXPECT_TRUE(bound->isHf());
  config.seq = 32;
  EXPECT_EQ(hf.bound(config).status().message(),
            "--model: " + dir +
                "/config.json: field 'sliding_window' is 16, shorter than seq 32; "
                "megac's attention does not window, so train with seq <= 16");
  ModelSource zoo =
      ModelSource::fromSpec("llama:layers=1,hidden=16,heads=2,seq=8,vocab=32").value();
  models::ModelConfig huge = *zoo.config();
  huge.batch = int64_t(1) << 21;
  EXPECT_NE(zoo.bound(huge).status().message().find("--model: key 'batch' is"), std::string::npos);
}

TEST(ModelSource, ErrorsNameTheSpec) {
  EXPECT_EQ(ModelSource::parse(std::nullopt, std::nullopt).status().message(),
            "give either --model SPEC or a model file (.mlir, .onnx)");
  EXPECT_EQ(ModelSource::parse("gpt:layers=2", "m.onnx").status().message(),
            "give either --model SPEC or a model file (.mlir, .onnx)");
  EXPECT_EQ(ModelSource::fromSpec("gpt:layer=2")
                .status()
                .message()
                .find("--model: unknown key 'layer' for gpt"),
            0u);
  EXPECT_EQ(ModelSource::fromSpec("hf:").status().message(),
            "--model hf:: give a model folder or its config.json (hf:PATH[,seq=S])");
  EXPECT_EQ(ModelSource::fromSpec("hf:x,seq=0").status().message(),
            "--model hf:x,seq=0: seq needs a positive integer up to 4194304, got '0'");
  EXPECT_EQ(ModelSource::fromSpec("hf:/does/not/exist").status().message(),
            "--model: cannot open /does/not/exist (give a model folder or its config.json)");
  std::string dir = writeConfig("errors", R"({"model_type": "llama", "rope_scaling":
      {"rope_type": "yarn", "factor": 4.0}})");
  EXPECT_EQ(ModelSource::fromSpec("hf:" + dir).status().message(),
            "--model: " + dir +
                "/config.json: field 'rope_scaling' is {\"rope_type\": \"yarn\", "
                "\"factor\": 4}; megac honours rope_type \"llama3\" only (Llama 3.1's scaling)");
}

TEST(ModelSource, LoadNeedsASequenceForHf) {
  std::string dir = writeConfig("load", kTinyMistral);
  mlir::MLIRContext ctx;
  ModelSource hf = ModelSource::fromSpec("hf:" + dir).value();
  StatusOr<LoadedModel> loaded = loadModel(ctx, hf);
  ASSERT_FALSE(loaded.isOk());
  EXPECT_EQ(loaded.status().message().find("--model hf:" + dir + ": give the sequence length"), 0u);
  StatusOr<LoadedModel> built =
      loadModel(ctx, ModelSource::fromSpec("hf:" + dir + ",seq=8").value());
  ASSERT_TRUE(built.isOk()) << built.status().message();
  EXPECT_EQ(built->description, "hf:" + dir + ",seq=8");
  EXPECT_EQ(lossKindOf(hf), passes::LossKind::causal);
  EXPECT_EQ(
      lossKindOf(ModelSource::fromSpec("bert:layers=1,hidden=16,heads=2,seq=8,vocab=32").value()),
      passes::LossKind::mlm);
}

} // namespace
} // namespace megac::driver
