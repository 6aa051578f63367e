// spindle_ui's client threads against a real spindled: replies reach the handler on the GUI
// thread, errors carry the server's code, a destroyed context drops its handler, requests sent
// at once are all answered, and the local-daemon rule and the launcher find and start spindled.

#include <QCoreApplication>
#include <QSettings>
#include <QThread>

#include <signal.h>

#include "studio_fixture.h"
#include "spindle/ui/connection_profiles.h"
#include "spindle/ui/local_daemon.h"

namespace spindle::testing {
namespace {

using namespace protocol;

class ConnectionTest : public StudioTest {};

TEST_F(ConnectionTest, HandshakeNamesTenantAndServer) {
  auto c = open_connection(kBobToken);
  EXPECT_TRUE(c->isOpen());
  EXPECT_EQ(c->tenant(), "bob");
  EXPECT_TRUE(c->serverVersion().startsWith("spindled")) << c->serverVersion().toStdString();
  EXPECT_EQ(c->endpoint().toStdString(), ipc());
}

TEST_F(ConnectionTest, ReplyArrivesOnTheGuiThreadWithTheServerAnswer) {
  auto c = open_connection();
  QObject context;
  std::optional<CapabilitiesReply> caps;
  QThread* handler_thread = nullptr;
  c->post(&context, Op::capabilities, Empty{}, [&](const Reply& r) {
    handler_thread = QThread::currentThread();
    ASSERT_TRUE(r.ok) << r.error.message;
    caps = std::get<CapabilitiesReply>(r.body);
  });
  ASSERT_TRUE(QTest::qWaitFor([&] { return caps.has_value(); }, 10000));
  EXPECT_EQ(handler_thread, QCoreApplication::instance()->thread());
  EXPECT_EQ(*caps, client()->capabilities());  // the same as a blocking client's
}

TEST_F(ConnectionTest, ErrorReplyCarriesTheServerCodeAndMessage) {
  auto c = open_connection();
  QObject context;
  QSignalSpy failed(c.get(), &ui::Connection::requestFailed);
  std::optional<Reply> got;
  c->post(&context, Op::catalog_show, AddressRequest{"spindle://alice/no-such-policy@latest"},
          [&](const Reply& r) { got = r; });
  ASSERT_TRUE(QTest::qWaitFor([&] { return got.has_value(); }, 10000));
  EXPECT_FALSE(got->ok);
  EXPECT_EQ(got->error.code, "not_found");
  EXPECT_NE(got->error.message.find("no-such-policy"), std::string::npos) << got->error.message;
  ASSERT_EQ(failed.count(), 1);
  EXPECT_EQ(failed.at(0).at(1).toString(), "not_found");
  EXPECT_TRUE(ui::errorText(*got).startsWith("not_found: "));
}

TEST_F(ConnectionTest, ManyRequestsInFlightAreEachAnsweredOnce) {
  auto c = open_connection();
  QObject context;
  std::vector<int> answered(50, 0);
  for (int i = 0; i < 50; ++i) {
    TokenizeRequest t;
    t.text = "Once upon a time " + std::to_string(i);
    c->post(&context, Op::tokenize, t, [&answered, i](const Reply& r) {
      EXPECT_TRUE(r.ok) << r.error.message;
      ++answered[size_t(i)];
    });
  }
  ASSERT_TRUE(QTest::qWaitFor([&] {
    return std::all_of(answered.begin(), answered.end(), [](int n) { return n > 0; });
  }, 20000));
  QTest::qWait(100);
  for (int n : answered) EXPECT_EQ(n, 1);
  // Same tokens as a blocking client for the last one.
  const auto want = client()->tokenize("Once upon a time 49");
  std::vector<int32_t> got;
  bool done = false;
  TokenizeRequest t;
  t.text = "Once upon a time 49";
  c->post(&context, Op::tokenize, t, [&](const Reply& r) {
    got = read_int32(std::get<TokenizeReply>(r.body).tokens, r.frames, "tokens");
    done = true;
  });
  ASSERT_TRUE(QTest::qWaitFor([&] { return done; }, 10000));
  EXPECT_EQ(got, want);
}

TEST_F(ConnectionTest, DestroyedContextDropsItsHandler) {
  auto c = open_connection();
  bool called = false;
  auto* context = new QObject;
  c->post(context, Op::status, Empty{}, [&](const Reply&) { called = true; });
  delete context;
  // A later request on a live context is answered, so the first reply had time to arrive.
  QObject live;
  bool second = false;
  c->post(&live, Op::status, Empty{}, [&](const Reply&) { second = true; });
  ASSERT_TRUE(QTest::qWaitFor([&] { return second; }, 10000));
  QTest::qWait(50);
  EXPECT_FALSE(called);
}

TEST_F(ConnectionTest, PostBeforeOpenFailsWithUnavailable) {
  ui::Connection c;
  QObject context;
  std::optional<Reply> got;
  c.post(&context, Op::status, Empty{}, [&](const Reply& r) { got = r; });
  ASSERT_TRUE(QTest::qWaitFor([&] { return got.has_value(); }, 5000));
  EXPECT_FALSE(got->ok);
  EXPECT_EQ(got->error.code, "unavailable");
}

TEST_F(ConnectionTest, OpenWithAWrongTokenFailsWithUnauthenticated) {
  ui::Connection c;
  QSignalSpy failed(&c, &ui::Connection::openFailed);
  c.open(options("not-a-token"));
  ASSERT_TRUE(QTest::qWaitFor([&] { return failed.count() > 0; }, 10000));
  EXPECT_EQ(failed.at(0).at(0).toString(), "unauthenticated");
  EXPECT_FALSE(c.isOpen());
}

TEST_F(ConnectionTest, LocalDaemonRuleFindsEndpointAndToken) {
  const ui::LocalDaemon d = ui::local_daemon(QString::fromStdString(dir_.string()));
  EXPECT_EQ(d.endpoint.toStdString(), ipc());
  EXPECT_TRUE(d.socket_exists);
  // The two-tenant dir has no `token` file (spindled writes one only for a `local` tenant).
  EXPECT_TRUE(d.token.isEmpty());
  qputenv("SPINDLE_DATA_DIR", QByteArray::fromStdString(dir_.string()));
  EXPECT_EQ(ui::local_daemon().data_dir.toStdString(), std::filesystem::absolute(dir_).string());
  qunsetenv("SPINDLE_DATA_DIR");
}

TEST_F(ConnectionTest, LauncherStartsSpindledAndReportsItsEndpoints) {
  const auto dir = fresh_gui_dir("launch");
  std::filesystem::remove(dir / "tokens.json");  // a `local` tenant and a token file
  ui::DaemonLauncher launcher;
  QSignalSpy ready(&launcher, &ui::DaemonLauncher::ready);
  QSignalSpy failed(&launcher, &ui::DaemonLauncher::failed);
  QStringList lines;
  QObject::connect(&launcher, &ui::DaemonLauncher::output, [&](QString l) { lines << l; });
  launcher.start(QString::fromStdString(dir.string()),
                 {"--model", QString::fromStdString(stories_model_path().string())},
                 QString::fromStdString((binary_dir() / "app" / "spindled").string()));
  ASSERT_TRUE(QTest::qWaitFor([&] { return ready.count() + failed.count() > 0; }, 60000));
  ASSERT_EQ(ready.count(), 1) << (failed.isEmpty() ? "" : failed.at(0).at(0).toString().toStdString());
  const QStringList endpoints = ready.at(0).at(0).toStringList();
  ASSERT_FALSE(endpoints.isEmpty());
  const ui::LocalDaemon d = ui::local_daemon(QString::fromStdString(dir.string()));
  EXPECT_EQ(endpoints.at(0), d.endpoint);
  EXPECT_FALSE(d.token.isEmpty());
  ui::Connection c;
  QSignalSpy opened(&c, &ui::Connection::opened);
  c.open(d.options());
  ASSERT_TRUE(QTest::qWaitFor([&] { return opened.count() > 0; }, 10000));
  EXPECT_EQ(c.tenant(), "local");
  EXPECT_TRUE(std::any_of(lines.begin(), lines.end(), [](const QString& l) { return l.startsWith("spindled ready: "); }));
  // Stop the daemon the launcher would leave running (it outlives the Studio).
  ASSERT_GT(launcher.pid(), 0);
  EXPECT_EQ(::kill(pid_t(launcher.pid()), SIGTERM), 0);
}

TEST(ConnectionProfiles, ValidateNamesTheBadField) {
  ui::ConnectionProfile p{"lab", "tcp://head:7878", "tok", "", "", ""};
  EXPECT_TRUE(p.validate().startsWith("server key:")) << p.validate().toStdString();
  p.server_key = QString(40, 'a');
  EXPECT_TRUE(p.validate().isEmpty()) << p.validate().toStdString();
  p.client_public_key = QString(40, 'b');
  EXPECT_TRUE(p.validate().startsWith("client keys:")) << p.validate().toStdString();
  p.endpoint = "http://x";
  EXPECT_TRUE(p.validate().startsWith("endpoint:"));
}

TEST(ConnectionProfiles, SaveAndLoadRoundTrip) {
  QCoreApplication::setOrganizationName("SpindleTest");
  QCoreApplication::setApplicationName("profiles-" + QString::number(::getpid()));
  ui::save_profiles({});
  ui::upsert_profile({"a", "tcp://h:1", "t1", QString(40, 'k'), "", ""});
  ui::upsert_profile({"b", "ipc:///tmp/x.sock", "t2", "", "", ""});
  ui::upsert_profile({"a", "tcp://h:2", "t3", QString(40, 'k'), "", ""});
  const auto all = ui::load_profiles();
  ASSERT_EQ(all.size(), 2);
  EXPECT_EQ(all[0].endpoint, "tcp://h:2");
  EXPECT_EQ(all[0].token, "t3");
  EXPECT_EQ(all[1].name, "b");
  QSettings().clear();
}

}  // namespace
}  // namespace spindle::testing
