// Schema -> form for the real schemas of the built-in keywords and length plugins (fields,
// types, defaults, required, min/max), the produced config accepted by reward_test, and a bad
// field marked with the server's validation message (model and widget).

#include <QLineEdit>
#include <QSignalSpy>
#include <QSpinBox>
#include <QTest>

#include "studio_fixture.h"
#include "spindle/ui/reward_designer_model.h"
#include "spindle/ui/reward_designer_view.h"
#include "spindle/ui/schema_form.h"
#include "../../../ui/src/reward_term_editor.h"

namespace spindle::testing {
namespace {

using nlohmann::json;
using ui::SchemaField;

std::string schema_of(protocol::Client& c, const std::string& plugin) {
  for (const auto& p : c.reward_plugins().plugins) {
    if (p.name == plugin) return p.config_schema_json;
  }
  ADD_FAILURE() << "no plugin " << plugin;
  return "{}";
}

// reward_test with one row and one short sample: the server validates the spec first.
protocol::RewardTestRequest one_row(const std::string& spec, const std::string& base) {
  protocol::RewardTestRequest r;
  r.spec_json = spec;
  r.rows = {{"Once upon a time", "", ""}};
  r.address = base;
  r.num_samples = 1;
  r.sampling_params.max_tokens = 4;
  return r;
}

class SchemaFormTest : public StudioTest {};

TEST_F(SchemaFormTest, KeywordsSchemaGivesItsFieldsAndAValidConfig) {
  auto c = client();
  const ui::SchemaForm form(schema_of(*c, "keywords"));
  ASSERT_TRUE(form.schemaError().empty());
  EXPECT_FALSE(form.allowsAdditional());
  ASSERT_EQ(form.fields().size(), 5u);
  const SchemaField* present = form.field("present");
  const SchemaField* absent = form.field("absent");
  const SchemaField* cs = form.field("case_sensitive");
  const SchemaField* ww = form.field("whole_words");
  const SchemaField* mode = form.field("mode");
  ASSERT_TRUE(present && absent && cs && ww && mode);
  EXPECT_EQ(present->type, SchemaField::Type::string_array);
  EXPECT_EQ(absent->type, SchemaField::Type::string_array);
  EXPECT_EQ(cs->type, SchemaField::Type::boolean);
  EXPECT_EQ(mode->type, SchemaField::Type::enumeration);
  EXPECT_EQ(mode->enum_values, (std::vector<std::string>{"fraction", "all"}));
  for (const auto& f : form.fields()) EXPECT_FALSE(f.required) << f.name;
  // Defaults from the descriptions ("default false", "default fraction"); none for the lists.
  EXPECT_EQ(cs->default_value, json(false));
  EXPECT_EQ(ww->default_value, json(false));
  EXPECT_EQ(mode->default_value, json("fraction"));
  EXPECT_FALSE(present->default_value.has_value());

  ui::SchemaForm edit = form;
  EXPECT_EQ(edit.toJson(), json({{"case_sensitive", false}, {"mode", "fraction"}, {"whole_words", false}}));
  edit.setValue("present", json::array({"cat", "dog"}));
  edit.setValue("mode", "all");
  const json config = edit.toJson();
  EXPECT_EQ(config["present"], json::array({"cat", "dog"}));
  const std::string spec =
      json({{"terms", {{{"name", "kw"}, {"plugin", "keywords"}, {"weight", 1.0}, {"config", config}}}}})
          .dump();
  const auto base = c->capabilities().bases.at(0).id;
  const auto reply = c->reward_test(one_row(spec, base));  // throws when the server refuses it
  EXPECT_EQ(reply.terms.size(), 1u);
}

TEST_F(SchemaFormTest, LengthSchemaMarksTargetRequiredWithMinimums) {
  auto c = client();
  const ui::SchemaForm form(schema_of(*c, "length"));
  ASSERT_EQ(form.fields().size(), 5u);
  EXPECT_EQ(form.fields().front().name, "target") << "required fields come first";
  const SchemaField* target = form.field("target");
  const SchemaField* unit = form.field("unit");
  const SchemaField* tol = form.field("tolerance");
  const SchemaField* penalty = form.field("penalty_per_unit");
  const SchemaField* floor = form.field("floor");
  ASSERT_TRUE(target && unit && tol && penalty && floor);
  EXPECT_TRUE(target->required);
  EXPECT_FALSE(unit->required);
  EXPECT_EQ(target->type, SchemaField::Type::number);
  EXPECT_EQ(target->minimum, 0.0);
  EXPECT_FALSE(target->maximum.has_value());
  EXPECT_FALSE(target->default_value.has_value());
  EXPECT_EQ(unit->type, SchemaField::Type::enumeration);
  EXPECT_EQ(unit->default_value, json("tokens"));
  EXPECT_EQ(tol->default_value, json(0.0));
  EXPECT_EQ(tol->minimum, 0.0);
  EXPECT_EQ(floor->default_value, json(0.0));
  EXPECT_FALSE(penalty->default_value.has_value()) << "\"default 1/target\" is not a number";

  // Without the required target the server refuses it and names the field.
  ui::SchemaForm edit = form;
  EXPECT_FALSE(edit.toJson().contains("target"));
  const auto base = c->capabilities().bases.at(0).id;
  auto spec_with = [](const json& config) {
    return json({{"terms", {{{"name", "len"}, {"plugin", "length"}, {"weight", 0.5}, {"config", config}}}}})
        .dump();
  };
  try {
    c->reward_test(one_row(spec_with(edit.toJson()), base));
    ADD_FAILURE() << "a config without target was accepted";
  } catch (const protocol::ClientError& e) {
    const auto parsed = ui::parseConfigError(e.what());
    ASSERT_TRUE(parsed.has_value()) << e.what();
    EXPECT_EQ(parsed->term, "len");
    EXPECT_EQ(parsed->plugin, "length");
    EXPECT_EQ(parsed->field, "target");
  }
  edit.setValue("target", 12);
  edit.setValue("unit", "chars");
  const auto reply = c->reward_test(one_row(spec_with(edit.toJson()), base));
  EXPECT_EQ(reply.terms.at(0).plugin, "length");
}

TEST(ConfigErrorParse, NamesTermPluginAndField) {
  auto e = ui::parseConfigError(
      "term 'kw' (plugin keywords): config.presnt: unknown field (allowed: absent, present)");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->term, "kw");
  EXPECT_EQ(e->plugin, "keywords");
  EXPECT_EQ(e->field, "presnt");
  e = ui::parseConfigError("term 'a b' (plugin length): length: config.target must be a number");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->term, "a b");
  EXPECT_EQ(e->field, "target");
  e = ui::parseConfigError("term 'x' (plugin keywords): config.present[1]: expected string, got number");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->field, "present");
  EXPECT_FALSE(ui::parseConfigError("rows[0].metadata_json: not a JSON object"));
}

TEST_F(SchemaFormTest, BadFieldIsHighlightedWithTheServersMessage) {
  auto conn = open_connection();
  auto* model = new ui::RewardDesignerModel(conn.get());
  model->setAutosavePath({});
  ui::RewardDesignerView view(conn.get(), model);
  ASSERT_TRUE(QTest::qWaitFor([&] { return model->plugin("length") && model->plugin("keywords"); }, 20000));
  auto c = client();
  model->setAddress(QString::fromStdString(c->capabilities().bases.at(0).id));
  model->rows()->setRows({{"Once upon a time", "", ""}});
  const int len = model->addTerm("length", "len");
  const int kw = model->addTerm("keywords", "kw");
  ASSERT_EQ(view.termEditors().size(), 2);

  // A wrong type on a form field: the server's schema check names config.tolerance.
  model->setTermValue(len, "target", 10);
  model->setTermValue(len, "tolerance", "wide");
  QSignalSpy validated(model, &ui::RewardDesignerModel::validated);
  model->validate();
  ASSERT_TRUE(QTest::qWaitFor([&] { return validated.count() > 0; }, 30000));
  EXPECT_FALSE(validated.last().at(0).toBool());
  const std::string message = model->term(len).form.error("tolerance");
  EXPECT_NE(message.find("config.tolerance"), std::string::npos) << message;
  EXPECT_NE(message.find("term 'len' (plugin length)"), std::string::npos) << message;
  EXPECT_TRUE(model->error().startsWith("invalid_argument: ")) << model->error().toStdString();
  EXPECT_EQ(model->error().mid(18).toStdString(), message);
  ui::RewardTermEditor* editor = view.termEditors()[len];
  QWidget* field = editor->fieldEditor("tolerance");
  ASSERT_NE(field, nullptr);
  EXPECT_EQ(editor->fieldError("tolerance").toStdString(), message);
  EXPECT_EQ(field->property("spindleError").toString().toStdString(), message);
  EXPECT_TRUE(field->styleSheet().contains("border")) << "no red frame";
  EXPECT_EQ(field->toolTip().toStdString(), message);
  EXPECT_TRUE(editor->fieldError("target").isEmpty());

  // Editing the field clears its mark; an unknown key typed as extra JSON marks the extras line.
  model->setTermValue(len, "tolerance", 2);
  EXPECT_TRUE(editor->fieldError("tolerance").isEmpty());
  EXPECT_TRUE(field->styleSheet().isEmpty());
  model->setTermExtras(kw, json({{"presnt", json::array({"cat"})}}));
  validated.clear();
  model->validate();
  ASSERT_TRUE(QTest::qWaitFor([&] { return validated.count() > 0; }, 30000));
  EXPECT_FALSE(validated.last().at(0).toBool());
  const std::string unknown = model->term(kw).form.error(ui::SchemaForm::kExtrasField);
  EXPECT_NE(unknown.find("config.presnt"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("unknown field"), std::string::npos) << unknown;
  EXPECT_EQ(view.termEditors()[kw]->fieldError(ui::SchemaForm::kExtrasField).toStdString(), unknown);
  EXPECT_TRUE(model->term(len).form.errors().empty()) << "the other term is not marked";

  // Fixed, the spec validates.
  model->setTermExtras(kw, json::object());
  model->setTermValue(kw, "present", json::array({"cat"}));
  validated.clear();
  model->validate();
  ASSERT_TRUE(QTest::qWaitFor([&] { return validated.count() > 0; }, 30000));
  EXPECT_TRUE(validated.last().at(0).toBool()) << model->error().toStdString();
  EXPECT_TRUE(model->error().isEmpty());
}

}  // namespace
}  // namespace spindle::testing
